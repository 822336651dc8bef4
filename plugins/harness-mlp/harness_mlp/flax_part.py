"""mlp_train's model in Flax (linen): the module the JAX backend's trainer initialises from the seed and trains.

Imported only in a JAX worker. Flax has no global mixed-precision policy: each module computes in its `dtype`
and keeps its parameters in float32 (`param_dtype`'s default), so the part reads the run's precision from the
BuildContext.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

#: The dtype the layers compute in under each training precision (parameters stay float32).
COMPUTE_DTYPES = {"amp_bf16": jnp.bfloat16, "amp_fp16": jnp.float16}


class Hidden(nn.Module):
    """One hidden layer, a block: Dense to `units` with bias, then ReLU."""

    units: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.Dense(self.units, dtype=self.dtype, name="dense")(x))


class MLP(nn.Module):
    """The hidden layers in order (each a Hidden class, or its recomputed form from BuildContext.block), then a
    Dense classifier to `num_classes`: the logits."""

    blocks: tuple
    hidden: int
    num_classes: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        for index, block in enumerate(self.blocks):
            x = block(self.hidden, self.dtype, name=f"hidden{index}")(x)
        return nn.Dense(self.num_classes, dtype=self.dtype, name="classifier")(x)


class FlaxMLP:
    """An MLP classifier in flax.linen: ReLU hidden Dense layers, a Dense classifier, Flax's default initialisation."""

    def build(self, params, ctx) -> MLP:
        """`layers` hidden layers of `hidden` units, each one block (ctx.block), computing in the precision's dtype."""
        blocks = tuple(ctx.block(Hidden) for _ in range(params.layers))
        return MLP(blocks, params.hidden, params.num_classes, COMPUTE_DTYPES.get(ctx.precision, jnp.float32))


PART = FlaxMLP()
