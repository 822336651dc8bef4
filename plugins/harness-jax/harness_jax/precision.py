"""The neutral training `precision` mapped to JAX: the compute dtype a model part builds its Flax modules with,
the matmul precision, and loss scaling for amp_fp16 (which neither JAX nor Optax has): dynamic (`loss_scale:
dynamic`, GradScaler's constants), or static (the neutral STATIC_LOSS_SCALE, no finite check). Neither reads anything
on the host: the dynamic scale's finite check and skip are jnp.where inside the step.

Flax has no global mixed-precision policy: each module computes in its `dtype` and keeps its parameters in
`param_dtype` (float32 by default). A part reads the run's precision from BuildContext.precision and builds its
modules with `dtype=compute_dtype(precision)`; the trainer keeps the loss in float32.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from harness.workloads.training import STATIC_LOSS_SCALE
from harness_jax.device import set_matmul_precision

#: The compute dtype of each neutral precision (parameters stay float32).
COMPUTE_DTYPES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "float16", "amp_bf16": "bfloat16"}

#: Dynamic loss scaling for amp_fp16, with torch.amp.GradScaler's constants.
INIT_SCALE = 2.0**16
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000
LOSS_SCALING_API = (
    f"dynamic loss scaling written in JAX (JAX and Optax have none): loss x scale, gradients / scale, update "
    f"skipped when any gradient is not finite; scale from {INIT_SCALE:g}, x{GROWTH_FACTOR:g} after "
    f"{GROWTH_INTERVAL} finite steps, x{BACKOFF_FACTOR:g} on overflow (torch.amp.GradScaler's constants), on the "
    "device (jnp.where: no host sync)"
)
STATIC_LOSS_SCALING_API = (
    f"static loss scaling written in JAX: loss x {STATIC_LOSS_SCALE:g}, gradients / {STATIC_LOSS_SCALE:g}, no finite "
    "check (no host sync)"
)


def compute_dtype(precision: str) -> jnp.dtype:
    """The dtype a part's Flax modules compute in under a neutral training precision (float32, float16, bfloat16)."""
    return jnp.dtype(COMPUTE_DTYPES[precision])


def precision_api(precision: str, device, loss_scale: str = "dynamic") -> tuple[str, str]:
    """Set JAX's matmul precision for the run; (the compute dtype's name, the record's api.precision)."""
    matmul = set_matmul_precision(precision, device)
    compute = COMPUTE_DTYPES[precision]
    api = ((f"Flax modules with dtype={compute}, param_dtype=float32 (the model part's compute dtype for "
            f"{precision}; parameters in float32); " if compute != "float32" else "float32 throughout; ")
           + matmul)
    if precision == "amp_fp16":
        api += f"; {STATIC_LOSS_SCALING_API if loss_scale == 'static' else LOSS_SCALING_API}"
    return compute, api


class LossScale(NamedTuple):
    """The dynamic loss scale's state: the scale and how many finite steps in a row it has seen."""

    scale: Any
    good_steps: Any


def initial_loss_scale() -> LossScale:
    """The loss scale a run starts from: INIT_SCALE, no finite step seen."""
    return LossScale(jnp.float32(INIT_SCALE), jnp.int32(0))


def unscale(grads, scale):
    """The gradients of the scaled loss divided by the scale."""
    return jax.tree_util.tree_map(lambda g: g / scale, grads)


def skip_non_finite(grads, old: tuple[Any, Any], new: tuple[Any, Any], loss_scale: LossScale):
    """Dynamic loss scaling's update: the `new` (params, optimizer state) kept only when every gradient is finite,
    else the `old`, and the scale grown after GROWTH_INTERVAL finite steps or backed off on overflow."""
    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
    kept = jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), new, old)
    grown = loss_scale.good_steps + 1 >= GROWTH_INTERVAL
    return kept, LossScale(
        scale=jnp.where(finite, jnp.where(grown, loss_scale.scale * GROWTH_FACTOR, loss_scale.scale),
                        loss_scale.scale * BACKOFF_FACTOR),
        good_steps=jnp.where(finite & ~grown, loss_scale.good_steps + 1, 0),
    )
