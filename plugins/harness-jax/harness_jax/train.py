"""The JAX trainer: any training workload (harness.workloads.training) with its Flax model part, on one device.

The workload says what is trained (its seeded batches, optimizer, loss, parameter count) and its part builds
the Flax module (harness_jax.resnet50 for resnet50_train; a workload's own package for others). This module owns
how a step runs, for every part alike: the precision (harness_jax.precision), the execution mode (jax.jit of the
whole step with the state donated, or eager), recomputation (flax.linen.remat around each block the part passes
through BuildContext.block), gradient accumulation and the step itself (harness_jax.step), the Optax optimizer
mapped from the workload's OptimizerSpec, the loss, and the inputs (harness_jax.inputs).
"""

from __future__ import annotations

import inspect
import os
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from harness.errors import Unsupported
from harness.seam.adapter import Prepared, RunInputs
from harness.workloads.base import Workload
from harness.workloads.training import (
    STATIC_LOSS_SCALE,
    BuildContext,
    OptimizerSpec,
    items_per_replica_step,
    loss_scale_of,
    part_api,
)
from harness_jax import EAGER_TRAINING
from harness_jax.inputs import Feed, build_feed
from harness_jax.precision import initial_loss_scale, precision_api
from harness_jax.step import TrainState, build_train_step, cross_entropy


def prepare(workload: Workload, part, p, device, run: RunInputs) -> Prepared:
    """The part's Flax model initialised from the seed, the workload's batches on the device, its optimizer in
    Optax, and one training step in the run's execution mode; every technique's API into the record's `api`."""
    training = workload.training
    api: dict[str, Any] = {}
    scaling = loss_scale_of(p) if p.precision == "amp_fp16" else None
    compute, api["precision"] = precision_api(p.precision, device.jax, scaling or "dynamic")
    channels_last = training.images and p.memory_format == "channels_last"
    if training.images:
        api["memory_format"] = memory_format_api(channels_last)
    model = build_model(part, p, run.seed, channels_last, api)
    if getattr(part, "classifier", None):
        api["classifier"] = part.classifier
    feed = build_feed(training, p, device, run, channels_last)
    api["data"], api["inputs"], api["input_pipeline"] = feed.data, feed.api, feed.pipeline
    params, model_state = init_variables(model, feed.example, run.seed)
    optimizer = build_optimizer(training.optimizer(p), api)
    loss = build_loss(part, api)
    state = TrainState(params, model_state, optimizer.init(params),
                       initial_loss_scale() if scaling == "dynamic" else None)
    call = build_step(p, device, model, loss, optimizer, run, api)
    if compute != "float32" and not device.is_gpu:
        run.ctx.warnings.append(f"{compute} on the CPU: XLA's CPU emulates it; not a guide to any GPU")
    trained = TrainingRun(p, device, call, jax.device_put(state, device.jax), feed, parameter_count(params),
                          ("images_per_step" if training.images else "items_per_step",
                           items_per_replica_step(workload, p)))
    return Prepared(step=trained.step, api=api, checks=trained.checks, timing_fields=trained.timing_fields,
                    close=trained.close)


def memory_format_api(channels_last: bool) -> str:
    """The record's api.memory_format of an image workload: the layout the model part is asked for."""
    layout, asked = ("NHWC", "channels_last") if channels_last else ("NCHW", "channels_first")
    return (f"{layout} activations: the model part builds for BuildContext.layout={asked!r}"
            + (", the input transposed NCHW -> NHWC on the host" if channels_last else "")
            + "; XLA's layout assignment picks the physical layouts inside jax.jit")


def build_model(part, p, seed: int, channels_last: bool, api: dict) -> nn.Module:
    """The part's Flax module, each block it passes through ctx.block under flax.linen.remat where recompute is
    `blocks`; the model's and recomputation's APIs into `api` (the model as the part's docstring's first
    paragraph says it)."""
    wrapped: list[str] = []

    def remat(block):
        wrapped.append(getattr(block, "__name__", type(block).__name__))
        return nn.remat(block)

    ctx = BuildContext(seed=seed, framework=nn, layout="channels_last" if channels_last else "channels_first",
                       precision=p.precision, recompute=remat if p.recompute == "blocks" else (lambda block: block))
    model = part.build(p, ctx)
    describe = getattr(part, "describe", None)
    api["model"] = describe(p) if describe is not None else " ".join(
        (inspect.getdoc(part) or type(part).__name__).split("\n\n")[0].split())
    api.update(part_api(part, p))
    if p.recompute == "blocks" and not wrapped:
        raise Unsupported("recompute: blocks, but the model part passes no block through BuildContext.block: "
                          "there is nothing to recompute")
    api["recompute"] = (f"flax.linen.remat (jax.checkpoint) around each of the {len(wrapped)} "
                        f"{'/'.join(dict.fromkeys(wrapped))} blocks" if wrapped else "none")
    return model


def init_variables(model: nn.Module, example: jax.ShapeDtypeStruct, seed: int) -> tuple[Any, Any]:
    """(params, the model's other variable collections) of `model` from `seed`, for a batch of one `example`;
    built by jax.jit on the default device (one compiled computation instead of hundreds of dispatched
    initializers)."""
    variables = jax.jit(model.init)(jax.random.PRNGKey(seed), jnp.zeros(example.shape, example.dtype))
    return variables["params"], {name: value for name, value in variables.items() if name != "params"}


def parameter_count(params) -> int:
    """Trainable scalars: every leaf of the `params` collection (BatchNorm statistics live in `batch_stats`)."""
    return int(sum(int(np.prod(leaf.shape)) for leaf in jax.tree_util.tree_leaves(params)))


def matrices(params):
    """True for the weights of two or more dimensions (adamw's `decay: matrices`), False for biases and scales."""
    return jax.tree_util.tree_map(lambda leaf: leaf.ndim >= 2, params)


def build_optimizer(spec: OptimizerSpec, api: dict):
    """The workload's optimizer in Optax (sgd: optax.sgd, torch.optim.SGD's update; adamw: optax.adamw, decoupled
    weight decay as torch.optim.AdamW, on every weight or on `matrices` only); its API into `api`."""
    if spec.name == "sgd":
        api["optimizer"] = f"optax.sgd(learning_rate={spec.lr}, momentum={spec.momentum}) (torch.optim.SGD's update)"
        return optax.sgd(learning_rate=spec.lr, momentum=spec.momentum)
    (b1, b2), mask = spec.betas, matrices if spec.decay == "matrices" else None
    api["optimizer"] = (f"optax.adamw(learning_rate={spec.lr}, b1={b1}, b2={b2}, eps={spec.eps}, "
                        f"weight_decay={spec.weight_decay}"
                        + (", mask=weights of 2+ dimensions" if mask else "") + ") (torch.optim.AdamW's update)")
    return optax.adamw(learning_rate=spec.lr, b1=b1, b2=b2, eps=spec.eps, weight_decay=spec.weight_decay, mask=mask)


def build_loss(part, api: dict) -> Callable[[Any, Any], Any]:
    """The part's own `loss(outputs, labels)` where it has one, else the neutral cross-entropy; its API into `api`."""
    own = getattr(part, "loss", None)
    if own is not None:
        api["loss"] = f"the model part's own loss ({type(part).__name__}.loss)"
        return own
    api["loss"] = "optax.softmax_cross_entropy_with_integer_labels on float32 logits, mean"
    return cross_entropy


def build_step(p, device, model, loss, optimizer, run: RunInputs, api: dict):
    """The training step as called in the timed loop: jax.jit with the state donated (compiled, default), or the
    plain function (eager); the execution and grad_accum APIs into `api`."""
    accum = p.grad_accum
    # execution: default is what JAX users train with: the jax.jit step (JAX's own tutorials and Flax's)
    compiled = p.execution in ("compiled", "default")
    scaling = loss_scale_of(p) if p.precision == "amp_fp16" else None
    loss_scaling = scaling is not None
    train_step = build_train_step(model, loss, optimizer, accum, scaling == "dynamic", "fori_loop" if compiled else "python",
                                  static_scale=STATIC_LOSS_SCALE if scaling == "static" else None)
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


def xla_command_buffers() -> str:
    """What XLA_FLAGS say about XLA's CUDA-graph command buffers (XLA's default where unset)."""
    flags = os.environ.get("XLA_FLAGS") or ""
    hits = [f for f in flags.split() if "command_buffer" in f]
    return " ".join(hits) if hits else "XLA's default command buffers (XLA_FLAGS sets none)"


class TrainingRun:
    """A built training run: the state the step updates, the timed step, and what is read after it."""

    def __init__(self, p, device, call, state: TrainState, feed: Feed, n_params: int, items: tuple[str, float]):
        self.p, self.device, self.call, self.feed = p, device, call, feed
        self.n_params, self.items = n_params, items
        self.holder: dict[str, Any] = {"state": state}
        self.losses: dict[str, Any] = {}

    def step(self) -> None:
        """One training step; the device holds its outputs (the clock waits on them)."""
        holder, losses = self.holder, self.losses
        holder["state"], loss = self.call(holder["state"], *self.feed.next())
        losses.setdefault("first", loss)
        losses["last"] = loss  # read as a number only after the timed region
        self.device.hold((holder["state"], loss))

    def checks(self) -> dict:
        """The inputs' fingerprint, the model's parameter count, the first and last losses."""
        return {
            "inputs_fingerprint": self.feed.fingerprint,
            "model_parameters": self.n_params,
            "loss_first": float(self.losses["first"]),
            "loss_last": float(self.losses["last"]),
        }

    def timing_fields(self) -> dict:
        """The items (images) of one step, jax.jit's compilations, and the loss scale under amp_fp16."""
        out: dict[str, Any] = {self.items[0]: self.items[1]}
        if self.feed.bytes_per_step:
            out["host_to_device_bytes_per_step"] = self.feed.bytes_per_step
        size = getattr(self.call, "_cache_size", None)
        if self.p.execution in ("compiled", "default") and callable(size):
            out["compilations"] = size()
        if self.p.precision == "amp_fp16":
            scale = self.holder["state"].loss_scale
            out["loss_scale"] = float(scale.scale) if scale is not None else STATIC_LOSS_SCALE
        return out

    def close(self) -> None:
        """Drop the state and losses, and the device's hold on the last step's outputs."""
        self.holder.clear()
        self.losses.clear()
        self.device.hold(None)
