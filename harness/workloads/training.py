"""A training workload, neutral: the techniques every backend's trainer maps, the seeded batches, the optimizer and
the loss, written once; and the part each framework builds itself, the model (`ModelPart`).

Who owns what (docs/architecture.md, "Bring your own model"): the workload says *what* is trained (parameters,
inputs from the seed, optimizer and its hyperparameters, loss, parameter count, FLOPs); a part per framework
builds the model; the backend's trainer owns *how* a step runs (precision policy, execution mode, recomputation,
gradient accumulation, optimizer placement, input pipeline, data parallel, profiling, out-of-memory mapping).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol

import numpy as np
from pydantic import Field, StrictInt, ValidationInfo, field_validator

from harness.workloads.base import Execution, Params

#: The parameters every training workload has, which the backends' trainers read (TrainingParams declares them).
TRAINING_FIELDS = ("batch_size", "precision", "execution", "recompute", "grad_accum", "replicas", "inputs")

#: The constant loss scale of `loss_scale: static`, the same on every backend: 2**8. A constant has no way back
#: from an overflow (no inf check: that is what static means), so it is chosen low, with headroom below float16's
#: overflow, rather than at a dynamic scaler's start (2**15 Keras, 2**16 torch), which relies on backing off: CNN
#: classifiers need little scaling (ResNet-50 trained in float16 without any in Micikevicius et al., "Mixed
#: Precision Training", 2018). An overflow shows: the loss goes non-finite and the record's status says `diverged`.
STATIC_LOSS_SCALE = 2.0**8

#: How a trainer reads `loss_scale` from a workload's parameters that may predate it.
LOSS_SCALES = ("dynamic", "static")


def loss_scale_problem(precision: str, loss_scale: str) -> str | None:
    """Why `loss_scale` cannot go with `precision` (static scaling means anything only under amp_fp16); else None."""
    if loss_scale == "static" and precision != "amp_fp16":
        return (f"loss_scale: static applies only to precision amp_fp16 (loss scaling guards float16 gradients); "
                f"got precision {precision}: leave loss_scale out or set it to dynamic")
    return None


def checked_loss_scale(value: str, info: ValidationInfo) -> str:
    """A parameter model's validator of `loss_scale` (declared after `precision`, which it reads): the value, or a
    ValueError that the scenario's message shows under `params.loss_scale`."""
    problem = loss_scale_problem(info.data.get("precision", "fp32"), value)
    if problem:
        raise ValueError(problem)
    return value


#: The datasheet precision (harness.machine.peaks) a training precision's matmuls run in: autocast computes them
#: in the half type.
PEAK_PRECISIONS = {"fp32": "fp32", "tf32": "tf32", "amp_fp16": "fp16", "amp_bf16": "bf16"}


def training_peak_precision(p) -> str:
    """A training workload's `peak_precision`: the datasheet precision of its `precision` (PEAK_PRECISIONS)."""
    return PEAK_PRECISIONS[p.precision]


def loss_scale_of(p) -> str:
    """The run's loss scaling under amp_fp16 (`dynamic` for a workload whose parameters have no loss_scale)."""
    return getattr(p, "loss_scale", "dynamic")


class TrainingParams(Params):
    """The techniques of a training workload, each mapped by every backend's trainer (docs/execution.md): a
    workload's parameter model extends it with what its model needs (sizes, classes, learning rate)."""

    batch_size: int = Field(32, ge=1, le=65536)
    precision: Literal["fp32", "tf32", "amp_fp16", "amp_bf16"] = "fp32"
    execution: Execution = "eager"
    #: `blocks`: every block the model part passes through BuildContext.recompute is recomputed in backward
    recompute: Literal["none", "blocks"] = "none"
    grad_accum: int = Field(1, ge=1, le=1024)
    #: data-parallel replicas (docs/distributed.md); batch_size is per replica, the headline global
    replicas: StrictInt = Field(1, ge=1, le=1024)
    #: `device`: one batch resident on the device; `host`: HOST_BATCHES batches fed through the framework's pipeline
    inputs: Literal["device", "host"] = "device"
    #: amp_fp16's loss scaling: `dynamic`, as each framework's users get it (torch's GradScaler reads its inf check
    #: on the host every step); `static`, a constant STATIC_LOSS_SCALE with no inf check and no host sync
    loss_scale: Literal["dynamic", "static"] = "dynamic"

    @field_validator("loss_scale")
    @classmethod
    def _loss_scale_with_amp_fp16(cls, value: str, info: ValidationInfo) -> str:
        return checked_loss_scale(value, info)


@dataclass(frozen=True)
class OptimizerSpec:
    """The optimizer a workload trains with, in neutral terms; each backend maps it to its framework's own
    (torch.optim, keras.optimizers, optax) and records which implementation ran."""

    name: Literal["sgd", "adamw"]
    lr: float
    #: sgd: momentum (0: plain SGD)
    momentum: float = 0.0
    #: adamw: beta1, beta2, epsilon, decoupled weight decay
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    #: adamw: which weights decay: `all`, or `matrices` (weights of two or more dimensions only, as nanoGPT)
    decay: Literal["all", "matrices"] = "all"


@dataclass(frozen=True)
class Training:
    """The neutral half of a training workload.

    `batch(params, seed, rank=0, *, channels_last=False, probe=False, batch=0)` draws one micro-batch (features,
    labels) as numpy arrays from the seed: replica `rank` of a data-parallel run draws its own; `batch` is batch
    number `batch` of a host dataset (0: the one `inputs: device` keeps on the device); a capacity `probe` may
    repeat a few distinct items. An image model's features are NCHW (`channels_last=True` asks for NHWC; other
    workloads ignore it).
    """

    batch: Callable[..., tuple[np.ndarray, np.ndarray]]
    optimizer: Callable[[Any], OptimizerSpec]
    #: trainable parameters the model must have (the record's check; None: not known in advance)
    parameters: Callable[[Any], int | None] = lambda params: None
    #: `cross_entropy`: the mean softmax cross-entropy of the model's output (logits on the last axis) against
    #: integer labels, over every position, computed in float32; a part may bring its own `loss` instead
    loss: Literal["cross_entropy"] = "cross_entropy"
    #: whether the features are images with a channel axis, so `memory_format` (NCHW or NHWC) applies
    images: bool = False


@dataclass
class BuildContext:
    """What a framework's trainer hands a model part: the seed, the framework's own module, the layout, the run's
    precision, and the wrapper that makes one block recomputed under `recompute: blocks`."""

    seed: int
    #: the framework module the part builds with: `torch`, the Keras in use (Keras 3 or tf_keras), `flax.linen`
    framework: Any
    #: `channels_first` or `channels_last` (an image model's layout; other models ignore it)
    layout: str = "channels_first"
    precision: str = "fp32"
    #: wraps one block so backward recomputes its activations (a torch Module, a Keras layer's call, a Flax Module
    #: class); the identity under `recompute: none`. The trainer counts the blocks it wrapped for the record.
    recompute: Callable[[Any], Any] = lambda block: block
    #: blocks passed through `recompute` so far
    blocks: int = 0

    def block(self, block: Any) -> Any:
        """`block`, recomputed in backward under `recompute: blocks` (counted either way)."""
        self.blocks += 1
        return self.recompute(block)


class ModelPart(Protocol):
    """The part of a training workload only one framework knows: its model. A part may also define
    `loss(outputs, labels)` in the framework's ops, which replaces the workload's neutral `loss`;
    `describe(params)`, the record's `api.model` (else the first paragraph of the part's docstring);
    `api(params)`, further record `api` entries the part decides (which attention ran, say); `block_name`, what
    `api.recompute` calls one block (`Bottleneck`); and `classifier`, the record's `api.classifier`: the output
    layer's precision policy under mixed precision."""

    def build(self, params: Any, ctx: BuildContext) -> Any:
        """The model (a torch `nn.Module` or a Keras `Model` seeded from ctx.seed; a Flax `Module`, which the
        trainer initialises from ctx.seed), each of its blocks passed through ctx.block."""


def items_per_replica_step(workload: Any, params: Any) -> float:
    """The items one training step trains on in one replica (images, samples, tokens): the workload's
    items_per_step over its replicas, every micro-batch counted."""
    return float(workload.items_per_step(params)) / workload.replicas(params)


def part_api(part: ModelPart, params: Any) -> dict[str, str]:
    """The record `api` entries a model part adds through its optional `api(params)` ({} where it has none)."""
    extra = getattr(part, "api", None)
    return dict(extra(params)) if extra is not None else {}


def missing_training_fields(params_model) -> list[str]:
    """The TRAINING_FIELDS a training workload's parameter model lacks ([] when it has them all)."""
    return [name for name in TRAINING_FIELDS if name not in params_model.model_fields]


def training_verdict(parameters: Callable[[Any], int | None], model: Callable[[Any], str] = lambda params: "",
                     ) -> Callable[[dict, Any], tuple[str | None, str | None]]:
    """A training workload's verdict on its checks (Workload.verdict): `diverged` for a non-finite first or last
    loss, `failed` for a model whose trainable parameter count is not `parameters(params)` (`model(params)` names
    the model in the message); (None, None) when they pass."""

    def verdict(checks: dict, params) -> tuple[str | None, str | None]:
        first, last = checks.get("loss_first"), checks.get("loss_last")
        if first is not None and last is not None and not (math.isfinite(first) and math.isfinite(last)):
            return "diverged", f"non-finite loss: loss_first={first}, loss_last={last}"
        count, expected = checks.get("model_parameters"), parameters(params)
        if count is not None and expected is not None and count != expected:
            named = model(params)
            return "failed", (f"wrong model: {count:,} trainable parameters, expected {expected:,}"
                              f"{f' for {named}' if named else ''}")
        return None, None

    return verdict
