"""mlp_train's torch part: the model as an `nn.Module`, built with the torch the trainer hands over (ctx.framework).

Only a worker running the torch backend imports this module; the trainer seeds torch before `build`, and owns
everything else (precision, execution mode, recomputation, optimizer, inputs, loss).
"""

from __future__ import annotations

from harness.workloads.training import BuildContext


class TorchMLP:
    """`layers` hidden Linear layers of `hidden` units, each followed by ReLU and each one block, then a Linear
    classifier to `num_classes`; biases everywhere, torch's default initialization."""

    def build(self, p, ctx: BuildContext):
        """The MLP as an nn.Sequential of the blocks and the classifier."""
        nn = ctx.framework.nn
        layers, width = [], p.features
        for _ in range(p.layers):
            layers.append(ctx.block(nn.Sequential(nn.Linear(width, p.hidden), nn.ReLU())))
            width = p.hidden
        layers.append(nn.Linear(width, p.num_classes))
        return nn.Sequential(*layers)


PART = TorchMLP()
