"""resnet50_train on torch: torchvision's ResNet-50 v1.5, SGD with momentum, synthetic on-device data.

One timed step is `grad_accum` micro-batches (forward, loss, backward) and one optimizer step.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable

from harness import stats
from harness.errors import Unsupported, WrongResult
from harness.measure import run_timed
from harness.workloads import get_workload
from harness.workloads.base import fingerprint
from harness.workloads.resnet50_train import parameter_count, synthetic_batch, train_flops_per_image

from backends.torch import CUDA_GRAPH_ON_CPU, GRAPH_WITH_GRAD_SCALER, KERAS_V1_ON_TORCH
from backends.torch import compat, device as devices, precision as precisions

#: Training steps run on a side stream before a whole-step CUDA graph is captured.
GRAPH_WARMUP_STEPS = 3
#: The residual stages of torchvision's ResNet whose Bottleneck blocks `recompute: blocks` wraps.
STAGES = ("layer1", "layer2", "layer3", "layer4")


def run(spec: dict, ctx) -> dict:
    """Execute one resnet50_train spec on torch and return its record fields."""
    import torch
    import torch.nn.functional as F
    import torchvision

    p = get_workload("resnet50_train").validate(spec["params"])
    options = spec.get("options") or {}
    seed = int(spec.get("seed", 0))
    if p.model != "resnet50":
        raise Unsupported(KERAS_V1_ON_TORCH)
    neutral = devices.resolve_device(spec.get("device", "auto"))
    device = devices.torch_device(neutral)
    execution = p.execution
    if execution == "graph":
        if device.type != "cuda":
            raise Unsupported(CUDA_GRAPH_ON_CPU)
        if p.precision == "amp_fp16":
            raise Unsupported(GRAPH_WITH_GRAD_SCALER)

    # --- techniques, each checked before anything is built --------------------------------------
    api: dict[str, Any] = {}
    flags = precisions.apply_tf32(p.precision, device)
    amp_name = precisions.AUTOCAST_DTYPE[p.precision]
    scaler = None
    if amp_name is None:
        autocast: Callable[[], Any] = contextlib.nullcontext
        api["precision"] = flags
    else:
        amp_dtype = precisions.torch_dtype(amp_name)
        compat.autocast(device.type, amp_dtype)  # Unsupported where this torch would switch it off

        def autocast():
            return torch.autocast(device_type=device.type, dtype=amp_dtype)

        api["precision"] = f"torch.autocast({device.type}, {amp_name})"
        if p.precision == "amp_fp16":
            scaler, scaler_api = compat.grad_scaler(device.type)
            api["precision"] += f" + {scaler_api}"
        api["precision"] += f"; {flags}"
    compile_mode = str(options.get("compile_mode", "default"))
    if execution == "compiled":
        reason = compat.compile_unsupported_reason()
        if reason:
            raise Unsupported(reason)

    # --- model, data, optimizer -----------------------------------------------------------------
    torch.manual_seed(seed)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None, num_classes=p.num_classes)
    n_params = sum(t.numel() for t in model.parameters() if t.requires_grad)
    expected = parameter_count(p.num_classes, p.model)
    if n_params != expected:
        raise WrongResult(f"torchvision resnet50 has {n_params} trainable parameters, expected {expected}")
    model = model.to(device)
    channels_last = p.memory_format == "channels_last"
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        api["memory_format"] = "model and input .to(memory_format=torch.channels_last)"
    else:
        api["memory_format"] = "torch.contiguous_format (NCHW)"
    if p.recompute == "blocks":
        wrapped = checkpoint_blocks(model)
        api["recompute"] = f"torch.utils.checkpoint.checkpoint(use_reentrant=False) per Bottleneck ({wrapped} blocks)"
    else:
        api["recompute"] = "none"
    model.train()

    images_np, labels_np = synthetic_batch(p, seed)
    inputs_fingerprint = fingerprint(images_np, labels_np)
    images = torch.from_numpy(images_np).to(device)
    if channels_last:
        images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.from_numpy(labels_np).to(device)
    del images_np, labels_np
    optimizer = torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum)
    api["optimizer"] = f"torch.optim.SGD(lr={p.lr}, momentum={p.momentum})"
    api["grad_accum"] = (
        f"{p.grad_accum} micro-batches of {p.batch_size}, loss / {p.grad_accum}, one optimizer.step()"
        if p.grad_accum > 1
        else "none (1 micro-batch per optimizer step)"
    )

    forward = model
    if execution == "compiled":
        forward = compat.torch_compile(model, mode=compile_mode)
        api["execution"] = f"torch.compile(mode={compile_mode})"
    elif execution == "graph":
        api["execution"] = "torch.cuda.CUDAGraph(whole step)"
    else:
        api["execution"] = "eager"

    accum = p.grad_accum

    def train_step():
        """One optimizer step of `accum` micro-batches; returns the last micro-batch's loss (unscaled)."""
        optimizer.zero_grad(set_to_none=True)
        loss = None
        for _ in range(accum):
            with autocast():
                logits = forward(images)
                loss = F.cross_entropy(logits, labels)
            backward_loss = loss / accum if accum > 1 else loss
            if scaler is not None:
                scaler.scale(backward_loss).backward()
            else:
                backward_loss.backward()
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        return loss.detach()

    losses: dict[str, Any] = {}
    if execution == "graph":
        graph_state: dict[str, Any] = {}

        def step():
            if "graph" not in graph_state:  # warm-up and capture inside the first step, like a compile
                graph_state["graph"], graph_state["loss"] = _capture_step(train_step, optimizer, losses)
            graph_state["graph"].replay()
            losses["last"] = graph_state["loss"]  # static: each replay overwrites it

    else:

        def step():
            loss = train_step()
            losses.setdefault("first", loss)
            losses["last"] = loss

    # --- measure --------------------------------------------------------------------------------
    images_per_step = float(p.batch_size * accum)
    devices.reset_peak_memory(device)
    timing = run_timed(
        step,
        devices.clock_for(device),
        spec.get("measure") or {},
        work_per_step=images_per_step,
        telemetry=ctx.telemetry_for(neutral),
    )
    peak = devices.peak_allocated_bytes(device)
    # read outside every timed region, and before the launch probe's steps overwrite a graph's loss
    loss_first = float(losses["first"].float().item())
    loss_last = float(losses["last"].float().item())

    timing_out = timing.fields(images_per_step=images_per_step)
    timing_out.update(devices.probe_launch_bound(step, device, timing, execution, ctx))

    samples = timing.rates(images_per_step)
    median = stats.median(samples)
    flops_per_image = train_flops_per_image(p.image_size, p.num_classes)
    record: dict[str, Any] = {
        **devices.identity(neutral, device),
        "api": api,
        "samples": samples,
        "step_time_s": timing.step_time_s(),
        "first_step_s": timing.first_step_s,
        "peak_allocated_bytes": peak,
        "tflops": median * flops_per_image / 1e12 if median is not None else None,
        "checks": {
            "inputs_fingerprint": inputs_fingerprint,
            "model_parameters": n_params,
            "loss_first": loss_first,
            "loss_last": loss_last,
        },
        "timing": timing_out,
    }
    if not (math.isfinite(loss_first) and math.isfinite(loss_last)):
        record["status"] = "diverged"
        record["error"] = f"non-finite loss: loss_first={loss_first}, loss_last={loss_last}"
    return record


def checkpoint_blocks(model) -> int:
    """Wrap every Bottleneck of layer1..layer4 so its forward runs under activation checkpointing.

    Whole blocks, not `checkpoint_sequential`: torchvision's ReLU(inplace=True) breaks segments that
    end inside a block. ResNet-50 draws no random numbers, so no RNG state is saved per block (which
    also keeps the step capturable in a CUDA graph). Returns how many blocks were wrapped.
    """
    import torch

    class CheckpointedBlock(torch.nn.Module):
        """A residual block whose activations are recomputed during backward instead of kept."""

        def __init__(self, block):
            super().__init__()
            self.block = block

        def forward(self, x):
            return compat.checkpoint(self.block, x, preserve_rng_state=False)

    wrapped = 0
    for stage_name in STAGES:
        stage = getattr(model, stage_name)
        for index in range(len(stage)):
            stage[index] = CheckpointedBlock(stage[index])
            wrapped += 1
    return wrapped


def _capture_step(train_step: Callable[[], Any], optimizer, losses: dict) -> tuple[Any, Any]:
    """Capture one whole training step (forward, loss, backward, optimizer.step) in a CUDA graph.

    As torch's docs prescribe: warm-up steps on a side stream (cuDNN autotuning, optimizer state,
    the allocator's pools), gradients set to None so the captured backward allocates them from
    the graph's pool, then capture. Returns the graph and its static loss tensor.
    """
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_STEPS):
            loss = train_step()
            losses.setdefault("first", loss)
    torch.cuda.current_stream().wait_stream(side)
    optimizer.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step()
    return graph, static_loss
