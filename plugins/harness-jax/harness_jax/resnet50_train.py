"""resnet50_train on JAX: the Flax ResNet-50 v1.5 (harness_jax.model), SGD with momentum (Optax), synthetic
on-device data.

One timed step is `grad_accum` micro-batches (forward, loss, backward) and one optimizer update, written
as one pure function of (params, batch_stats, optimizer state, loss scale) and the data. `compiled` is
jax.jit of that whole function with the state's buffers donated; `eager` calls it without jit, so JAX
dispatches it primitive by primitive.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import numpy as np

from harness.seam.adapter import Prepared, RunInputs
from harness.workloads.base import fingerprint
from harness.workloads.host_inputs import DEVICE_API
from harness.workloads.resnet50_train import synthetic_batch
from harness_jax import EAGER_TRAINING
from harness_jax.device import set_matmul_precision
from harness_jax.inputs import host_feed

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

    grad_fn = jax.value_and_grad(partial(scaled_loss, model, accum), has_aux=True)
    micro = partial(micro_step, grad_fn)

    def train_step(state: TrainState, images, labels):
        scale = state.loss_scale.scale if loss_scaling else jnp.float32(1.0)
        loss, batch_stats, grads = micro(state.params, state.batch_stats, images, labels, scale)
        if accum > 1:
            loss, batch_stats, grads = accumulate_micro_batches(
                partial(accumulate, micro, state.params, images, labels, scale), accum, loop, (loss, batch_stats, grads))
        if loss_scaling:
            grads = unscale(grads, scale)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        loss_scale = state.loss_scale
        if loss_scaling:
            params, opt_state, loss_scale = skip_non_finite(grads, state, params, opt_state)
        return TrainState(params, batch_stats, opt_state, loss_scale), loss

    return train_step


def scaled_loss(model, accum: int, params, batch_stats, images, labels, scale):
    """One micro-batch's loss times the loss scale over grad_accum (what is differentiated), with the
    unscaled loss and the updated BatchNorm statistics as the auxiliary output."""
    import jax.numpy as jnp
    import optax

    logits, updated = model.apply({"params": params, "batch_stats": batch_stats}, images, mutable=["batch_stats"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()
    # the mean over all grad_accum * batch_size images, as one large batch would give
    return loss * scale / accum, (loss, updated["batch_stats"])


def micro_step(grad_fn, params, batch_stats, images, labels, scale):
    """One micro-batch through `grad_fn` (jax.value_and_grad of scaled_loss): (loss, batch_stats, gradients)."""
    (_, (loss, batch_stats)), grads = grad_fn(params, batch_stats, images, labels, scale)
    return loss, batch_stats, grads


def accumulate(micro, params, images, labels, scale, _, carry):
    """One more micro-batch added to the running gradient sum (a fori_loop body: (i, carry) -> carry)."""
    import jax
    import jax.numpy as jnp

    _, stats, total = carry
    # Every micro-batch is the same batch (as on the other backends), so without this barrier XLA
    # sees the same gradients computed from the same inputs and computes them once (common
    # subexpressions merged, a loop-invariant body hoisted): grad_accum would count images it
    # never trained on. Passing the inputs through a barrier with the running sum makes each
    # micro-batch depend on the one before, as distinct batches would.
    (x, y), total = jax.lax.optimization_barrier(((images, labels), total))
    loss, stats, more = micro(params, stats, x, y, scale)
    return loss, stats, jax.tree_util.tree_map(jnp.add, total, more)


def accumulate_micro_batches(body, accum: int, loop: str, carry):
    """Micro-batches 1..grad_accum-1 through `body`, in jax.lax.fori_loop or a Python loop."""
    import jax

    if loop == "fori_loop":
        return jax.lax.fori_loop(1, accum, body, carry)
    for i in range(1, accum):
        carry = body(i, carry)
    return carry


def unscale(grads, scale):
    """The gradients of the scaled loss divided by the scale."""
    import jax

    return jax.tree_util.tree_map(lambda g: g / scale, grads)


def skip_non_finite(grads, state: TrainState, params, opt_state):
    """Dynamic loss scaling's update: the new params and optimizer state kept only when every gradient is
    finite, and the scale grown after GROWTH_INTERVAL finite steps or backed off on overflow."""
    import jax
    import jax.numpy as jnp

    finite = jnp.all(jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree_util.tree_leaves(grads)]))
    params, opt_state = _where(finite, params, state.params), _where(finite, opt_state, state.opt_state)
    loss_scale = state.loss_scale
    grown = loss_scale.good_steps + 1 >= GROWTH_INTERVAL
    loss_scale = LossScale(
        scale=jnp.where(finite, jnp.where(grown, loss_scale.scale * GROWTH_FACTOR, loss_scale.scale),
                        loss_scale.scale * BACKOFF_FACTOR),
        good_steps=jnp.where(finite & ~grown, loss_scale.good_steps + 1, 0),
    )
    return params, opt_state, loss_scale


def _where(finite, new, old):
    """`new` where `finite`, else `old`, leaf by leaf."""
    import jax
    import jax.numpy as jnp

    return jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), new, old)


def prepare(p, device, run: RunInputs) -> Prepared:
    """The Flax model in the precision's dtype, synthetic data on the device, Optax SGD, and one training step."""
    api: dict[str, Any] = {}
    compute = precision_api(p, device, api)
    model, params, batch_stats, n_params = build_model(p, run.seed, compute, api)
    optimizer = build_optimizer(p, api)
    state = initial_state(p, device, params, batch_stats, optimizer)
    batch, inputs_fingerprint, copied = build_feed(p, device, run, api)
    call = build_step(p, device, model, optimizer, run, api)
    if compute != "float32" and not device.is_gpu:
        run.ctx.warnings.append(f"{compute} on the CPU: XLA's CPU emulates it; not a guide to any GPU")
    training = Training(p, device, call, state, batch, n_params, inputs_fingerprint, copied)
    return Prepared(step=training.step, api=api, checks=training.checks, timing_fields=training.timing_fields,
                    close=training.close)


def precision_api(p, device, api: dict) -> str:
    """Set JAX's matmul precision; the precision's and the layout's APIs into `api`; the compute dtype."""
    precision = set_matmul_precision(p.precision, device.jax)
    compute = COMPUTE_DTYPES[p.precision]
    api["precision"] = (
        (f"Flax modules with dtype={compute}, param_dtype=float32 (parameters, BatchNorm reductions, classifier "
         f"and loss in float32); " if compute != "float32" else "float32 throughout; ")
        + precision + (f"; {LOSS_SCALING_API}" if p.precision == "amp_fp16" else "")
    )
    layout = _layout(p)
    api["memory_format"] = (
        f"{layout} activations: jax.lax.conv_general_dilated(dimension_numbers=({layout!r}, 'HWIO', {layout!r}))"
        + (" (input transposed NCHW -> NHWC on the host)" if layout == "NHWC" else "")
        + "; XLA's layout assignment picks the physical layouts inside jax.jit"
    )
    return compute


def _layout(p) -> str:
    return "NHWC" if p.memory_format == "channels_last" else "NCHW"


def build_model(p, seed: int, compute: str, api: dict):
    """The Flax ResNet-50 in the compute dtype and its variables from `seed`; (model, params, batch_stats,
    trainable parameter count); the model's API into `api`."""
    import jax.numpy as jnp

    # the model module imports Flax and JAX: only the worker imports it, never the backend's declarations
    from harness_jax import model as resnet

    model = resnet.ResNet50(p.num_classes, _layout(p), jnp.dtype(compute), p.recompute == "blocks", train=True)
    api["model"] = "ResNet-50 v1.5 in flax.linen (torchvision layout: stride on 3x3, no conv bias, BN eps 1e-5 momentum 0.1)"
    api["recompute"] = (f"flax.linen.remat (jax.checkpoint) around each of the {resnet.block_count()} bottleneck blocks"
                        if p.recompute == "blocks" else "none")
    params, batch_stats = resnet.init(model, p.image_size, seed)
    return model, params, batch_stats, resnet.parameter_count(params)


def build_optimizer(p, api: dict):
    """Optax SGD with momentum (torch.optim.SGD's update); its API and the loss's into `api`."""
    import optax

    optimizer = optax.sgd(learning_rate=p.lr, momentum=p.momentum)
    api["optimizer"] = f"optax.sgd(learning_rate={p.lr}, momentum={p.momentum}) (torch.optim.SGD's update)"
    api["loss"] = "optax.softmax_cross_entropy_with_integer_labels on float32 logits, mean"
    return optimizer


def initial_state(p, device, params, batch_stats, optimizer) -> TrainState:
    """The training state on the device: the variables, the optimizer's state, the loss scale under amp_fp16."""
    import jax
    import jax.numpy as jnp

    state = TrainState(params, batch_stats, optimizer.init(params),
                       LossScale(jnp.float32(INIT_SCALE), jnp.int32(0)) if p.precision == "amp_fp16" else None)
    return jax.device_put(state, device.jax)


def build_feed(p, device, run: RunInputs, api: dict):
    """Where each step's batch comes from: (next batch callable, fingerprint, bytes copied host to device per
    step); `inputs: host` feeds the host dataset by prefetched jax.device_put, `device` reuses one batch."""
    if getattr(p, "inputs", "device") == "host":
        feed = host_feed(p, device, run, _layout(p))
        api["data"] = api["inputs"] = feed.api
        return feed.next, feed.fingerprint, feed.bytes_per_step
    images, labels, inputs_fingerprint = build_inputs(p, device, run, api)
    api["inputs"] = DEVICE_API
    return (lambda: (images, labels)), inputs_fingerprint, 0


def build_inputs(p, device, run: RunInputs, api: dict):
    """The synthetic batch on the device, in the layout; (images, labels, fingerprint); the data API into `api`."""
    layout = _layout(p)
    images_host, labels_host = synthetic_batch(p, run.seed, channels_last=layout == "NHWC", probe=run.probe)
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
    return images, labels, inputs_fingerprint


def build_step(p, device, model, optimizer, run: RunInputs, api: dict):
    """The training step as called in the timed loop: jax.jit with the state donated (compiled), or the plain
    function (eager); the execution and grad_accum APIs into `api`."""
    import jax

    accum = p.grad_accum
    # execution: default is what JAX users train with: the jax.jit step (JAX's own tutorials and Flax's)
    compiled = p.execution in ("compiled", "default")
    loss_scaling = p.precision == "amp_fp16"
    train_step = build_train_step(model, optimizer, accum, loss_scaling, "fori_loop" if compiled else "python")
    if compiled:
        call = jax.jit(train_step, donate_argnums=(0,))
        api["execution"] = (("default -> compiled: " if p.execution == "default" else "")
                            + "jax.jit of the whole step: forward, loss, jax.value_and_grad backward, optax update"
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
    return call


class Training:
    """A built training run: the state the step updates, the timed step, and what is read after it."""

    def __init__(self, p, device, call, state: TrainState, batch, n_params: int,
                 inputs_fingerprint: str | None, copied: int = 0):
        self.p, self.device, self.call = p, device, call
        #: the (images, labels) the next step consumes; bytes each step copies from host to device
        self.batch, self.copied = batch, copied
        self.n_params, self.inputs_fingerprint = n_params, inputs_fingerprint
        self.holder: dict[str, Any] = {"state": state}
        self.losses: dict[str, Any] = {}

    def step(self) -> None:
        """One training step; the device holds its outputs (the clock waits on them)."""
        holder, losses = self.holder, self.losses
        holder["state"], loss = self.call(holder["state"], *self.batch())
        losses.setdefault("first", loss)
        losses["last"] = loss  # read as a number only after the timed region
        self.device.hold((holder["state"], loss))

    def checks(self) -> dict:
        """The inputs' fingerprint, the model's parameter count, the first and last losses."""
        return {
            "inputs_fingerprint": self.inputs_fingerprint,
            "model_parameters": self.n_params,
            "loss_first": float(self.losses["first"]),
            "loss_last": float(self.losses["last"]),
        }

    def timing_fields(self) -> dict:
        """The images of one step, jax.jit's compilations, and the loss scale under amp_fp16."""
        out: dict[str, Any] = {"images_per_step": float(self.p.batch_size * self.p.grad_accum)}
        if self.copied:
            out["host_to_device_bytes_per_step"] = self.copied
        size = getattr(self.call, "_cache_size", None)
        if self.p.execution in ("compiled", "default") and callable(size):
            out["compilations"] = size()
        if self.p.precision == "amp_fp16":
            out["loss_scale"] = float(self.holder["state"].loss_scale.scale)
        return out

    def close(self) -> None:
        """Drop the state and losses, and the device's hold on the last step's outputs."""
        self.holder.clear()
        self.losses.clear()
        self.device.hold(None)


def xla_command_buffers() -> str:
    """What XLA_FLAGS say about XLA's CUDA-graph command buffers (XLA's default where unset)."""
    import os

    flags = os.environ.get("XLA_FLAGS") or ""
    hits = [f for f in flags.split() if "command_buffer" in f]
    return " ".join(hits) if hits else "XLA's default command buffers (XLA_FLAGS sets none)"
