"""resnet50_train's torch model part: torchvision's ResNet-50 v1.5 (harness.workloads.resnet50_train), which the
torch trainer (train.py) runs like any training workload's model.

Its blocks are the 16 Bottleneck blocks of layer1..layer4: whole blocks, not `checkpoint_sequential`, as
torchvision's ReLU(inplace=True) breaks segments that end inside a block.
"""

from __future__ import annotations

import torchvision

from harness.workloads.training import BuildContext

#: The residual stages of torchvision's ResNet whose Bottleneck blocks are the model's blocks.
STAGES = ("layer1", "layer2", "layer3", "layer4")


class ResNet50Part:
    """torchvision.models.resnet50 with the workload's classes, untrained, each Bottleneck passed through ctx.block."""

    #: the record's api.classifier: the classifier precision policy of every backend's ResNet-50
    classifier = ("fc computes in the compute dtype (float16/bfloat16 under mixed precision), logits cast to float32 "
                  "for the loss: torch.nn.Linear under torch.autocast, then F.cross_entropy, which autocast runs "
                  "in float32")

    def build(self, p, ctx: BuildContext):
        """ResNet-50 v1.5 (torchvision's own initialization, from the generator the trainer seeded)."""
        model = torchvision.models.resnet50(weights=None, num_classes=p.num_classes)
        for stage_name in STAGES:
            stage = getattr(model, stage_name)
            for index in range(len(stage)):
                stage[index] = ctx.block(stage[index])
        return model


PART = ResNet50Part()
