"""resnet50_train on JAX: the Flax ResNet-50 v1.5 (harness_jax.model), SGD with momentum (Optax), synthetic
on-device data.

One timed step is `grad_accum` micro-batches (forward, loss, backward) and one optimizer update, written
as one pure function of (params, batch_stats, optimizer state, loss scale) and the data. `compiled` is
jax.jit of that whole function with the state's buffers donated; `eager` calls it without jit, so JAX
dispatches it primitive by primitive.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from harness.seam.adapter import Prepared
from harness.workloads.base import fingerprint
from harness.workloads.resnet50_train import synthetic_batch
from harness_jax.device import set_matmul_precision

#: The compute dtype of each neutral precision (parameters, classifier and loss stay float32).
COMPUTE_DTYPES = {"fp32": "float32", "tf32": "float32", "amp_fp16": "float16", "amp_bf16": "bfloat16"}

#: Dynamic loss scaling for amp_fp16, with torch.amp.GradScaler's constants.
INIT_SCALE = 2.0**16
GROWTH_FACTOR = 2.0
BACKOFF_FACTOR = 0.5
GROWTH_INTERVAL = 2000
LOSS_SCALING_API = (
    f"dynamic loss scaling written in JAX (JAX and Optax have none): loss x scale, gradients / scale, update "
    f"skipped when any gradient is not finite; scale from {INIT_SCALE:g}, x{GROWTH_FACTOR:g} after "
    f"{GROWTH_INTERVAL} finite steps, x{BACKOFF_FACTOR:g} on overflow (torch.amp.GradScaler's constants)"
)


class LossScale(NamedTuple):
    """The dynamic loss scale's state: the scale and how many finite steps in a row it has seen."""

    scale: Any
    good_steps: Any


class TrainState(NamedTuple):
    """Everything one step reads and writes (donated to the compiled step, so updated in place)."""

    params: Any
    batch_stats: Any
    opt_state: Any
    loss_scale: Any


def build_train_step(model, optimizer, accum: int, loss_scaling: bool, loop: str):
    """The whole training step as a pure function (state, images, labels) -> (state, loss).

    `loop` is how the grad_accum micro-batches repeat: "python" (eager: each micro-batch dispatched op
    by op) or "fori_loop" (compiled: jax.lax.fori_loop, so the compiled program holds one micro-batch).
    The loss returned is the last micro-batch's, unscaled.
    """
    import jax
    import jax.numpy as jnp
    import optax

    def loss_fn(params, batch_stats, images, labels, scale):
        logits, updated = model.apply({"params": params, "batch_stats": batch_stats}, images, mutable=["batch_stats"])
        loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()
        # the mean over all grad_accum * batch_size images, as one large batch would give
        return loss * scale / accum, (loss, updated["batch_stats"])

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def micro_step(params, batch_stats, images, labels, scale):
        (_, (loss, batch_stats)), grads = grad_fn(params, batch_stats, images, labels, scale)
        return loss, batch_stats, grads

    def train_step(state: TrainState, images, labels):
        scale = state.loss_scale.scale if loss_scaling else jnp.float32(1.0)
        loss, batch_stats, grads = micro_step(state.params, state.batch_stats, images, labels, scale)
        if accum > 1:
            def accumulate(_, carry):
                _, stats, total = carry
                # Every micro-batch is the same batch (as on the other backends), so without this barrier XLA
                # sees the same gradients computed from the same inputs and computes them once (common
                # subexpressions merged, a loop-invariant body hoisted): grad_accum would count images it
                # never trained on. Passing the inputs through a barrier with the running sum makes each
                # micro-batch depend on the one before, as distinct batches would.
                (x, y), total = jax.lax.optimization_barrier(((images, labels), total))
                loss, stats, more = micro_step(state.params, stats, x, y, scale)
                return loss, stats, jax.tree_util.tree_map(jnp.add, total, more)

            if loop == "fori_loop":
                loss, batch_stats, grads = jax.lax.fori_loop(1, accum, accumulate, (loss, batch_stats, grads))
            else:
                for i in range(1, accum):
                    loss, batch_stats, grads = accumulate(i, (loss, batch_stats, grads))
        if loss_scaling:
            grads = jax.tree_util.tree_map(lambda g: g / scale, grads)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        loss_scale = state.loss_scale
        if loss_scaling:
            finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
            keep = lambda new, old: jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), new, old)  # noqa: E731
            params, opt_state = keep(params, state.params), keep(opt_state, state.opt_state)
            grown = loss_scale.good_steps + 1 >= GROWTH_INTERVAL
            loss_scale = LossScale(
                scale=jnp.where(finite, jnp.where(grown, loss_scale.scale * GROWTH_FACTOR, loss_scale.scale),
                                loss_scale.scale * BACKOFF_FACTOR),
                good_steps=jnp.where(finite & ~grown, loss_scale.good_steps + 1, 0),
            )
        return TrainState(params, batch_stats, opt_state, loss_scale), loss

    return train_step


def prepare(p, device, run) -> Prepared:
    """The Flax model in the precision's dtype, synthetic data on the device, Optax SGD, and one training step."""
    import jax
    import jax.numpy as jnp
    import optax

    from harness_jax import EAGER_TRAINING, model as resnet

    api: dict[str, Any] = {}
    precision_api = set_matmul_precision(p.precision, device.jax)
    compute = COMPUTE_DTYPES[p.precision]
    amp = compute != "float32"
    loss_scaling = p.precision == "amp_fp16"
    api["precision"] = (
        (f"Flax modules with dtype={compute}, param_dtype=float32 (parameters, BatchNorm reductions, classifier "
         f"and loss in float32); " if amp else "float32 throughout; ")
        + precision_api + (f"; {LOSS_SCALING_API}" if loss_scaling else "")
    )
    layout = "NHWC" if p.memory_format == "channels_last" else "NCHW"
    api["memory_format"] = (
        f"{layout} activations: jax.lax.conv_general_dilated(dimension_numbers=({layout!r}, 'HWIO', {layout!r}))"
        + (" (input transposed NCHW -> NHWC on the host)" if layout == "NHWC" else "")
        + "; XLA's layout assignment picks the physical layouts inside jax.jit"
    )
    model = resnet.ResNet50(p.num_classes, layout, jnp.dtype(compute), p.recompute == "blocks", train=True)
    api["model"] = "ResNet-50 v1.5 in flax.linen (torchvision layout: stride on 3x3, no conv bias, BN eps 1e-5 momentum 0.1)"
    api["recompute"] = (f"flax.linen.remat (jax.checkpoint) around each of the {resnet.block_count()} bottleneck blocks"
                        if p.recompute == "blocks" else "none")

    params, batch_stats = resnet.init(model, p.image_size, run.seed)
    n_params = resnet.parameter_count(params)
    optimizer = optax.sgd(learning_rate=p.lr, momentum=p.momentum)
    api["optimizer"] = f"optax.sgd(learning_rate={p.lr}, momentum={p.momentum}) (torch.optim.SGD's update)"
    api["loss"] = "optax.softmax_cross_entropy_with_integer_labels on float32 logits, mean"
    state = TrainState(params, batch_stats, optimizer.init(params),
                       LossScale(jnp.float32(INIT_SCALE), jnp.int32(0)) if loss_scaling else None)
    state = jax.device_put(state, device.jax)

    images_host, labels_host = synthetic_batch(p, run.seed, channels_last=layout == "NHWC",
                                               probe=getattr(run, "probe", False))
    images = device.put(images_host)
    # int32 on the device: JAX keeps 64-bit integers only with jax_enable_x64, which would change every default dtype
    labels = device.put(labels_host.astype(np.int32))
    del images_host, labels_host
    # what reached the device, read back in the neutral layout (NCHW float32, int64 labels): equal on two
    # backends means equal inputs
    images_back = np.asarray(images)
    if layout == "NHWC":
        images_back = images_back.transpose(0, 3, 1, 2)
    inputs_fingerprint = fingerprint(images_back, np.asarray(labels).astype(np.int64))
    del images_back
    api["data"] = "images float32 and labels int32 (JAX without x64) resident on the device, jax.device_put once"

    accum = p.grad_accum
    compiled = p.execution == "compiled"
    train_step = build_train_step(model, optimizer, accum, loss_scaling, "fori_loop" if compiled else "python")
    if compiled:
        call = jax.jit(train_step, donate_argnums=(0,))
        api["execution"] = ("jax.jit of the whole step: forward, loss, jax.value_and_grad backward, optax update"
                            + (", loss scaling" if loss_scaling else "") + "; state buffers donated (donate_argnums=0)")
        if device.is_gpu:
            api["execution"] += f"; {xla_command_buffers()}"
    else:  # eager (graph and cuda_graph are refused by the backend before this is reached)
        call = train_step
        api["execution"] = "eager: the same step function without jax.jit, dispatched primitive by primitive"
        run.ctx.warnings.append(EAGER_TRAINING)
    api["grad_accum"] = (
        f"{accum} micro-batches of {p.batch_size} per optimizer update, loss / {accum}, gradients summed"
        + (" in jax.lax.fori_loop" if compiled else " in a Python loop")
        + "; each micro-batch's inputs through jax.lax.optimization_barrier with the running sum, so XLA cannot merge "
          "the identical micro-batches into one"
        if accum > 1 else "none (1 micro-batch per optimizer update)"
    )
    if amp and not device.is_gpu:
        run.ctx.warnings.append(f"{compute} on the CPU: XLA's CPU emulates it; not a guide to any GPU")

    holder = {"state": state}
    losses: dict[str, Any] = {}

    def step():
        holder["state"], loss = call(holder["state"], images, labels)
        losses.setdefault("first", loss)
        losses["last"] = loss  # read as a number only after the timed region
        device.hold((holder["state"], loss))

    def checks() -> dict:
        return {
            "inputs_fingerprint": inputs_fingerprint,
            "model_parameters": n_params,
            "loss_first": float(losses["first"]),
            "loss_last": float(losses["last"]),
        }

    def timing_fields() -> dict:
        out: dict[str, Any] = {"images_per_step": float(p.batch_size * accum)}
        size = getattr(call, "_cache_size", None)
        if compiled and callable(size):
            out["compilations"] = size()
        if loss_scaling:
            out["loss_scale"] = float(holder["state"].loss_scale.scale)
        return out

    def close() -> None:
        holder.clear()
        losses.clear()
        device.hold(None)

    return Prepared(step=step, api=api, checks=checks, timing_fields=timing_fields, close=close)


def xla_command_buffers() -> str:
    """What XLA_FLAGS say about XLA's CUDA-graph command buffers (XLA's default where unset)."""
    import os

    flags = os.environ.get("XLA_FLAGS") or ""
    hits = [f for f in flags.split() if "command_buffer" in f]
    return " ".join(hits) if hits else "XLA's default command buffers (XLA_FLAGS sets none)"
