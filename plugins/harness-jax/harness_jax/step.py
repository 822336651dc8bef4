"""One training step in JAX as a pure function of (state, inputs, labels): `grad_accum` micro-batches (forward,
loss, backward) and one Optax update, with dynamic loss scaling under amp_fp16. The trainer (harness_jax.train)
runs it under jax.jit (`compiled`, `default`) or as it is (`eager`, dispatched primitive by primitive).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from harness_jax.precision import skip_non_finite, unscale


class TrainState(NamedTuple):
    """Everything one step reads and writes (donated to the compiled step, so updated in place)."""

    params: Any
    #: the model's variable collections other than `params`, which a training step updates (BatchNorm's
    #: `batch_stats`); {} for a model without any
    model_state: Any
    opt_state: Any
    #: a harness_jax.precision.LossScale under amp_fp16, else None
    loss_scale: Any


def cross_entropy(outputs, labels):
    """The neutral loss (Training.loss `cross_entropy`): the mean softmax cross-entropy of the outputs (logits on
    the last axis) against the integer labels, over every position, in float32."""
    logits = outputs.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(logits.reshape(-1, logits.shape[-1]),
                                                           labels.reshape(-1)).mean()


def build_train_step(model, loss: Callable[[Any, Any], Any], optimizer, accum: int, loss_scaling: bool, loop: str,
                     static_scale: float | None = None):
    """The whole training step as a pure function (state, inputs, labels) -> (state, loss).

    `loss_scaling`: dynamic loss scaling (the state's LossScale, the update skipped on a non-finite gradient);
    `static_scale`: the loss times this constant and the gradients divided by it, with no finite check.

    `loss(outputs, labels)` is the workload's loss; `loop` is how the grad_accum micro-batches repeat: "python"
    (eager: each micro-batch dispatched op by op) or "fori_loop" (compiled: jax.lax.fori_loop, so the compiled
    program holds one micro-batch). The loss returned is the last micro-batch's, unscaled.
    """
    grad_fn = jax.value_and_grad(partial(scaled_loss, model, loss, accum), has_aux=True)
    micro = partial(micro_step, grad_fn)

    def train_step(state: TrainState, inputs, labels):
        scale = (state.loss_scale.scale if loss_scaling else
                 jnp.float32(static_scale) if static_scale is not None else jnp.float32(1.0))
        value, model_state, grads = micro(state.params, state.model_state, inputs, labels, scale)
        if accum > 1:
            body = partial(accumulate, micro, state.params, inputs, labels, scale)
            value, model_state, grads = accumulate_micro_batches(body, accum, loop, (value, model_state, grads))
        if loss_scaling or static_scale is not None:
            grads = unscale(grads, scale)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        loss_scale = state.loss_scale
        if loss_scaling:
            (params, opt_state), loss_scale = skip_non_finite(grads, (state.params, state.opt_state),
                                                              (params, opt_state), loss_scale)
        return TrainState(params, model_state, opt_state, loss_scale), value

    return train_step


def scaled_loss(model, loss, accum: int, params, model_state, inputs, labels, scale):
    """One micro-batch's loss times the loss scale over grad_accum (what is differentiated), with the unscaled
    loss and the model's updated state (BatchNorm statistics) as the auxiliary output."""
    outputs, updated = model.apply({"params": params, **model_state}, inputs, mutable=list(model_state))
    value = loss(outputs, labels)
    # the mean over all grad_accum * batch_size items, as one large batch would give
    return value * scale / accum, (value, updated)


def micro_step(grad_fn, params, model_state, inputs, labels, scale):
    """One micro-batch through `grad_fn` (jax.value_and_grad of scaled_loss): (loss, model state, gradients)."""
    (_, (value, model_state)), grads = grad_fn(params, model_state, inputs, labels, scale)
    return value, model_state, grads


def accumulate(micro, params, inputs, labels, scale, _, carry):
    """One more micro-batch added to the running gradient sum (a fori_loop body: (i, carry) -> carry)."""
    _, model_state, total = carry
    # Every micro-batch is the same batch (as on the other backends), so without this barrier XLA
    # sees the same gradients computed from the same inputs and computes them once (common
    # subexpressions merged, a loop-invariant body hoisted): grad_accum would count items it
    # never trained on. Passing the inputs through a barrier with the running sum makes each
    # micro-batch depend on the one before, as distinct batches would.
    (x, y), total = jax.lax.optimization_barrier(((inputs, labels), total))
    value, model_state, more = micro(params, model_state, x, y, scale)
    return value, model_state, jax.tree_util.tree_map(jnp.add, total, more)


def accumulate_micro_batches(body, accum: int, loop: str, carry):
    """Micro-batches 1..grad_accum-1 through `body`, in jax.lax.fori_loop or a Python loop."""
    if loop == "fori_loop":
        return jax.lax.fori_loop(1, accum, body, carry)
    for i in range(1, accum):
        carry = body(i, carry)
    return carry
