"""The torch trainer: any training workload (harness.workloads.training) with its torch model part.

The workload says what is trained (its seeded batches, optimizer, loss, parameter count); the part builds the
`nn.Module`; this module owns how a step runs, in named parts, each putting its `api` entries in: the precision
(precision.py), the model (seeded, on the device, its blocks recomputed under `recompute: blocks`, in
channels_last for images), data parallel (ddp.py), the inputs (inputs.py), the optimizer (optimizer.py), and the
step with its loss in its execution mode (step.py).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from backends.torch import compat
from backends.torch.ddp import data_parallel
from backends.torch.inputs import Feed, build_feed
from backends.torch.optimizer import build_optimizer
from backends.torch.precision import Amp, mixed_precision
from backends.torch.step import (
    CUDA_GRAPH_COMPILE_MODES,
    build_step,
    compile_mode,
    make_train_step,
)
from harness.errors import Unsupported
from harness.seam.adapter import Prepared, RunInputs
from harness.workloads.base import Workload
from harness.workloads.training import (
    BuildContext,
    ModelPart,
    items_per_replica_step,
    loss_scale_of,
    part_api,
)


def prepare(workload: Workload, part: ModelPart, p, device, run: RunInputs) -> Prepared:
    """The part's model on the device, the workload's batches and optimizer, and one training step."""
    training = workload.training
    # techniques first: each is checked before anything is built
    api: dict[str, Any] = {}
    amp = mixed_precision(p.precision, device.torch, api, loss_scale_of(p))
    if p.execution == "compiled":
        reason = compat.compile_unsupported_reason()
        if reason:
            raise Unsupported(reason)
    channels_last = training.images and p.memory_format == "channels_last"
    model, n_params = build_model(part, p, device.torch, run, api, images=training.images)
    api.update(part_api(part, p))
    if getattr(part, "classifier", None):
        api["classifier"] = part.classifier
    distributed = None
    if run.replica is not None:
        model, api["distribution"], distributed = data_parallel(model, device, p, run.options.get("optimize_ddp", "ddp_optimizer"))
        api["allreduce"] = ", ".join(f"{k}={v}" for k, v in distributed.items() if k != "env")
    feed = build_feed(training.batch, p, device.torch, run, channels_last=channels_last)
    api["inputs"], api["input_pipeline"] = feed.api, feed.pipeline
    optimizer = build_optimizer(training.optimizer(p), model, p, device.torch, amp, api)
    mode = compile_mode(p, run)
    net = compat.torch_compile(model, mode=mode) if mode in CUDA_GRAPH_COMPILE_MODES else model
    train_step = make_train_step(p, net, getattr(part, "loss", None), optimizer, amp)
    losses: dict[str, Any] = {}
    step = build_step(p.execution, mode, train_step, optimizer, losses, api, feed)
    checks = partial(training_checks, model, losses, n_params, feed.fingerprint)
    return Prepared(step=step, api=api, checks=checks, distributed={"allreduce": distributed} if distributed else None,
                    timing_fields=partial(timing_fields, p, feed, amp, images=training.images,
                                          items=items_per_replica_step(workload, p)))


def timing_fields(p, feed: Feed, amp: Amp | None = None, *, images: bool = True, items: float | None = None) -> dict:
    """The items one step trains on per replica (`images_per_step` for an image workload, else `items_per_step`);
    under inputs: host, the bytes each step copied from host to device; under amp_fp16, the loss scale after the
    timed blocks, GradScaler's or the static constant (as TensorFlow's and JAX's records give theirs). `items`: the
    workload's items of one replica's step (a language model's tokens), else batch_size * grad_accum."""
    out = {"images_per_step" if images else "items_per_step": float(p.batch_size * p.grad_accum) if items is None
           else items}
    if feed.bytes_per_step:
        out["host_to_device_bytes_per_step"] = feed.bytes_per_step
    scale = amp.loss_scale() if amp is not None else None
    if scale is not None:
        out["loss_scale"] = scale
    return out


def cudnn_benchmark_choice(execution: str, option: bool | None, probe: bool) -> tuple[bool, str]:
    """Whether cuDNN autotunes (torch.backends.cudnn.benchmark), and why: the `cudnn_benchmark` option where
    set; else torch's own default (off) under execution: default, what a user gets without asking, and on in
    the other modes, harness's choice (every convolution's fastest algorithm, as tuned training scripts such
    as torchvision's reference set it). A capacity probe never autotunes: it measures memory, not speed."""
    if probe:
        return False, "a capacity probe: no autotuning sweep"
    if option is not None:
        return bool(option), "torch.cudnn_benchmark option"
    if execution == "default":
        return False, "torch's default, followed under execution: default"
    return True, "harness's choice in this mode (torch's default is False; option torch.cudnn_benchmark)"


def set_cudnn_benchmark(execution: str, run: RunInputs) -> str:
    """Set torch.backends.cudnn.benchmark as cudnn_benchmark_choice says; the API line for the record."""
    on, why = cudnn_benchmark_choice(execution, run.options.get("cudnn_benchmark"), run.probe)
    torch.backends.cudnn.benchmark = on
    return f"torch.backends.cudnn.benchmark={on} ({why})"


def build_model(part: ModelPart, p, dev, run: RunInputs, api: dict, *, images: bool = False):
    """The part's model, built after torch's generator is seeded with the run's seed, on the device (images: in
    the memory format), its blocks checkpointed under `recompute: blocks`, in training mode; the model and its
    trainable parameter count."""
    torch.manual_seed(run.seed)
    if dev.type == "cuda":
        api["cudnn"] = set_cudnn_benchmark(p.execution, run)
    recompute = Recompute() if p.recompute == "blocks" else None
    # a torch model is NCHW whatever its memory format: channels_last is a layout of strides, set below
    ctx = BuildContext(seed=run.seed, framework=torch, precision=p.precision)
    if recompute is not None:
        ctx.recompute = recompute
    model = part.build(p, ctx)
    describe = getattr(part, "describe", None)
    if describe is not None:
        api["model"] = describe(p)
    n_params = sum(t.numel() for t in model.parameters() if t.requires_grad)
    model = model.to(dev)
    if images and p.memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
        api["memory_format"] = "model and input .to(memory_format=torch.channels_last)"
    elif images:
        api["memory_format"] = "torch.contiguous_format (NCHW)"
    api["recompute"] = recompute.api(ctx.blocks) if recompute is not None else "none"
    model.train()
    return model, n_params


class CheckpointedBlock(torch.nn.Module):
    """A block whose activations are recomputed during backward instead of kept (non-reentrant checkpointing).

    The RNG state is saved per block only where the block holds a dropout module, the one kind that draws
    random numbers: a model that draws none (ResNet-50, the MLP) saves none, which also keeps the step
    capturable in a CUDA graph. A block that draws them through torch.nn.functional must be a Dropout module.
    """

    def __init__(self, block: torch.nn.Module):
        super().__init__()
        self.block = block
        self.preserve_rng_state = any(isinstance(m, torch.nn.modules.dropout._DropoutNd) for m in block.modules())

    def forward(self, *inputs):
        return compat.checkpoint(self.block, *inputs, preserve_rng_state=self.preserve_rng_state)


class Recompute:
    """BuildContext.recompute under `recompute: blocks`: each block the part passes becomes a CheckpointedBlock;
    the blocks' classes are kept for the record."""

    def __init__(self) -> None:
        self.kinds: list[str] = []

    def __call__(self, block: torch.nn.Module) -> CheckpointedBlock:
        if type(block).__name__ not in self.kinds:
            self.kinds.append(type(block).__name__)
        return CheckpointedBlock(block)

    def api(self, blocks: int) -> str:
        """The record's api.recompute: the checkpointing call, per which block, how many; Unsupported where the
        part passed no block through BuildContext.block (nothing would be recomputed)."""
        if not blocks:
            raise Unsupported("recompute: blocks, but the model part passes no block through BuildContext.block: "
                              "nothing would be recomputed")
        return f"torch.utils.checkpoint.checkpoint(use_reentrant=False) per {' / '.join(self.kinds)} ({blocks} blocks)"


def training_checks(model, losses: dict, n_params: int, inputs_fingerprint: str | None) -> dict:
    """What the run's record checks, read after the timed region: the inputs, the model, the losses."""
    return {
        "inputs_fingerprint": inputs_fingerprint,
        "model_parameters": n_params,
        "loss_first": float(losses["first"].float().item()),
        "loss_last": float(losses["last"].float().item()),
        # equal on every replica of a data-parallel run: the all-reduced updates kept the weights identical
        "parameters_sum": float(sum(float(t.detach().double().sum()) for t in model.parameters())),
    }
