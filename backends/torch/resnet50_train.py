"""resnet50_train on torch: torchvision's ResNet-50 v1.5, SGD with momentum, synthetic on-device data.

One timed step is `grad_accum` micro-batches (forward, loss, backward) and one optimizer step.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from backends.torch import compat
from backends.torch import precision as precisions
from backends.torch.inputs import Feed, build_feed
from harness.errors import Unsupported
from harness.seam.adapter import Prepared, RunInputs
from harness.seam.distributed import collective_env

#: torch.compile modes that capture the compiled graphs in CUDA graphs (torch's docs: reduce-overhead, max-autotune)
CUDA_GRAPH_COMPILE_MODES = ("reduce-overhead", "max-autotune")

#: Training steps run on a side stream before a whole-step CUDA graph is captured.
GRAPH_WARMUP_STEPS = 3
#: The residual stages of torchvision's ResNet whose Bottleneck blocks `recompute: blocks` wraps.
STAGES = ("layer1", "layer2", "layer3", "layer4")


def prepare(p, device, run: RunInputs) -> Prepared:
    """torchvision's ResNet-50 v1.5, synthetic data on the device, SGD with momentum, and one training step."""
    # techniques first: each is checked before anything is built
    api: dict[str, Any] = {}
    amp = mixed_precision(p.precision, device.torch, api)
    if p.execution == "compiled":
        reason = compat.compile_unsupported_reason()
        if reason:
            raise Unsupported(reason)
    model, n_params = build_model(p, device.torch, run, api)
    distributed = None
    if run.replica is not None:
        model, api["distribution"], distributed = data_parallel(model, device, p, run.options.get("optimize_ddp", "ddp_optimizer"))
        api["allreduce"] = ", ".join(f"{k}={v}" for k, v in distributed.items() if k != "env")
    feed = build_feed(p, device.torch, run)
    api["inputs"] = feed.api
    optimizer = build_optimizer(p, model, amp, api)
    mode = compile_mode(p, run)
    net = compat.torch_compile(model, mode=mode) if mode in CUDA_GRAPH_COMPILE_MODES else model
    train_step = make_train_step(p, net, optimizer, amp)
    losses: dict[str, Any] = {}
    step = build_step(p.execution, mode, train_step, optimizer, losses, api, feed)
    checks = partial(training_checks, model, losses, n_params, feed.fingerprint)
    return Prepared(step=step, api=api, checks=checks, distributed={"allreduce": distributed} if distributed else None,
                    timing_fields=partial(timing_fields, p, feed, amp.scaler))


def timing_fields(p, feed: Feed, scaler=None) -> dict:
    """The images of one step; under inputs: host, the bytes each step copied from host to device; under
    amp_fp16, GradScaler's loss scale after the timed blocks (as TensorFlow's and JAX's records give theirs)."""
    out = {"images_per_step": float(p.batch_size * p.grad_accum)}
    if feed.bytes_per_step:
        out["host_to_device_bytes_per_step"] = feed.bytes_per_step
    if scaler is not None:
        out["loss_scale"] = float(scaler.get_scale())
    return out


@dataclass(frozen=True)
class Amp:
    """How a step runs mixed precision: the autocast context to enter (a null one in float32), the GradScaler."""

    autocast: Callable[[], Any] = contextlib.nullcontext
    scaler: Any = None


def mixed_precision(precision: str, dev, api: dict) -> Amp:
    """TF32 set explicitly from the precision, autocast and (amp_fp16) a GradScaler; the API into `api`."""
    flags = precisions.apply_tf32(precision, dev)
    amp_name = precisions.AUTOCAST_DTYPE[precision]
    if amp_name is None:
        api["precision"] = flags
        return Amp()
    amp_dtype = precisions.torch_dtype(amp_name)
    compat.autocast(dev.type, amp_dtype)  # Unsupported where this torch would switch it off
    scaler = None
    api["precision"] = f"torch.autocast({dev.type}, {amp_name})"
    if precision == "amp_fp16":
        scaler, scaler_api = compat.grad_scaler(dev.type)
        api["precision"] += f" + {scaler_api}"
    api["precision"] += f"; {flags}"
    import torch

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=amp_dtype)

    return Amp(autocast, scaler)


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
    import torch

    on, why = cudnn_benchmark_choice(execution, run.options.get("cudnn_benchmark"), run.probe)
    torch.backends.cudnn.benchmark = on
    return f"torch.backends.cudnn.benchmark={on} ({why})"


def build_model(p, dev, run: RunInputs, api: dict):
    """torchvision's ResNet-50 seeded with the run's seed, on the device in the memory format, its blocks
    checkpointed under `recompute: blocks`, in training mode; the model and its trainable parameter count."""
    import torch
    import torchvision

    torch.manual_seed(run.seed)
    if dev.type == "cuda":
        api["cudnn"] = set_cudnn_benchmark(p.execution, run)
    model = torchvision.models.resnet50(weights=None, num_classes=p.num_classes)
    n_params = sum(t.numel() for t in model.parameters() if t.requires_grad)
    model = model.to(dev)
    if p.memory_format == "channels_last":
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
    return model, n_params


def build_optimizer(p, model, amp: Amp, api: dict):
    """SGD with momentum over the model's parameters; its API and grad_accum's into `api`."""
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=p.lr, momentum=p.momentum)
    api["optimizer"] = f"torch.optim.SGD(lr={p.lr}, momentum={p.momentum})"
    if amp.scaler is not None:
        # GradScaler.step reads its inf/NaN check on the host once a step (docs/execution.md); a fused
        # SGD that takes the check as a device tensor diverged in eager mode on an H200 (torch 2.11)
        api["optimizer"] += "; GradScaler.step syncs the host once a step"
    api["grad_accum"] = (
        f"{p.grad_accum} micro-batches of {p.batch_size} in a Python loop, loss / {p.grad_accum}, one optimizer.step()"
        if p.grad_accum > 1
        else "none (1 micro-batch per optimizer step)"
    )
    return optimizer


def momentum_buffers_ready(optimizer, api: dict) -> None:
    """SGD's momentum buffers, created as zeros before the whole step is compiled. SGD creates them in its
    first step, so torch.compile would trace the step twice, without optimizer state and then with it, and
    the second compile (14-19 s of a ResNet-50 step on an H200) would land in the warm-up, not in the first
    step that reports the compile. With dampening 0 a zero buffer gives the first step momentum * 0 + grad,
    the gradient, as SGD's own first step does: the training is the same."""
    import torch

    groups = [group for group in optimizer.param_groups if group["momentum"]]  # momentum 0 keeps no buffers
    for group in groups:
        for param in group["params"]:
            optimizer.state[param]["momentum_buffer"] = torch.zeros_like(param, memory_format=torch.preserve_format)
    if groups:
        api["optimizer"] += "; momentum buffers created (zeros) before compiling, so the step compiles once"


def make_train_step(p, net, optimizer, amp: Amp) -> Callable[[Any, Any], Any]:
    """The training step of `net` (the model, or its compiled form) on a batch (images, labels): one optimizer
    step of grad_accum micro-batches, returning the last micro-batch's loss (unscaled)."""
    import torch.nn.functional as F

    accum, autocast, scaler = p.grad_accum, amp.autocast, amp.scaler

    def train_step(images, labels):
        optimizer.zero_grad(set_to_none=True)
        loss = None
        for _ in range(accum):
            with autocast():
                logits = net(images)
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

    return train_step


def compile_mode(p, run: RunInputs) -> str | None:
    """torch.compile's mode under execution compiled (None otherwise); Unsupported for grad_accum > 1 under a
    mode that replays CUDA graphs.

    CUDA-graph compile modes replay each compiled graph into the same output memory, so a compiled
    optimizer step that reads the gradients (outputs of the backward's graph) across graph breaks trips
    over overwritten outputs (torch 2.11 on an H200, 2026-11-30: "accessing tensor output of CUDAGraphs
    that has been overwritten", in SGD's first step, even with cudagraph_mark_step_begin per step).
    These modes compile the model (forward and, through AOTAutograd, backward) and leave
    optimizer.step() eager: the documented way to use them for training.
    """
    mode = run.options.get("compile_mode", "default") if p.execution == "compiled" else None
    if mode in CUDA_GRAPH_COMPILE_MODES and p.grad_accum > 1:
        raise Unsupported(
            f"grad_accum > 1 under torch.compile mode {mode!r} (CUDA graphs): the micro-batches' backward calls "
            "accumulate into gradients that are outputs of a replayed CUDA graph, which torch refuses "
            "(pytorch/pytorch#169545); use compile_mode default or max-autotune-no-cudagraphs"
        )
    return mode


def build_step(execution: str, mode: str | None, train_step: Callable[[Any, Any], Any], optimizer, losses: dict,
               api: dict, feed: Feed) -> Callable[[], None]:
    """The timed step in the execution mode on the feed's next batch, keeping the first and last losses in
    `losses`; its API into `api`."""
    if execution == "cuda_graph":
        api["execution"] = "torch.cuda.CUDAGraph of the whole step (forward, loss, backward, optimizer.step), replayed"
        if feed.refill is not None:
            # a graph replays fixed input addresses: each step copies its batch into the captured input tensors
            api["execution"] += "; each step's host batch copied into the graph's static inputs (copy_, non_blocking)"
        return graph_replay_step(train_step, optimizer, losses, feed)
    model_only = mode in CUDA_GRAPH_COMPILE_MODES
    whole_step = train_step
    if execution == "compiled" and model_only:
        api["execution"] = (f"torch.compile(model, mode={mode}): forward and backward (AOTAutograd) compiled and "
                            "replayed as CUDA graphs; loss and optimizer.step() eager")
    elif execution == "compiled":
        momentum_buffers_ready(optimizer, api)
        whole_step = compat.torch_compile(train_step, mode=mode)
        api["execution"] = (f"torch.compile(mode={mode}) of the whole step: forward, loss, backward (AOTAutograd) "
                            "and optimizer.step(), zero_grad included")
    elif execution == "default":
        # what a torch user trains with: the plain Python step (torch has no other default path)
        api["execution"] = "default -> eager: the plain Python step (forward, loss, backward, optimizer.step())"
    else:
        api["execution"] = "eager"
    return called_step(whole_step, losses, feed, mark_steps=model_only)


def graph_replay_step(train_step: Callable[[Any, Any], Any], optimizer, losses: dict, feed: Feed) -> Callable[[], None]:
    """A step that captures `train_step` on the feed's first batch in a CUDA graph on its first call (warm-up
    included, like a compile) and replays the graph on every call, after refilling its inputs where the feed
    moves batches from the host."""
    graph_state: dict[str, Any] = {}
    static = feed.next()

    def step():
        if "graph" not in graph_state:  # warm-up and capture inside the first step, like a compile
            graph_state["graph"], graph_state["loss"] = _capture_step(partial(train_step, *static), optimizer, losses)
        if feed.refill is not None:
            feed.refill(*static)
        graph_state["graph"].replay()
        losses["last"] = graph_state["loss"]  # static: each replay overwrites it

    return step


def called_step(whole_step: Callable[[Any, Any], Any], losses: dict, feed: Feed, *,
                mark_steps: bool) -> Callable[[], None]:
    """A step that calls `whole_step` on the feed's next batch; with `mark_steps` (CUDA-graph compile modes)
    each call first announces a new step to torch's CUDA graph trees."""
    import torch

    # under CUDA graphs (CUDA_GRAPH_COMPILE_MODES) each replay overwrites the last one's outputs: a new
    # step is announced to the graph trees, and the first loss is copied out before it is overwritten
    mark_step = getattr(getattr(torch, "compiler", None), "cudagraph_mark_step_begin", None)
    mark_step = mark_step if mark_steps else None

    def step():
        if mark_step is not None:
            mark_step()
        loss = whole_step(*feed.next())
        if "first" not in losses:
            losses["first"] = loss.clone()
        losses["last"] = loss

    return step


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


#: DistributedDataParallel's settings, explicit so the record states them (torch's defaults, except
#: broadcast_buffers: off, so BatchNorm's running statistics stay per replica as under tf.distribute,
#: and gradient_as_bucket_view: on, gradients are views into the all-reduce buckets, no copy).
DDP_SETTINGS = {"bucket_cap_mb": 25, "gradient_as_bucket_view": True, "static_graph": False, "broadcast_buffers": False}


#: the `optimize_ddp` option -> torch._dynamo.config.optimize_ddp (booleans: accepted by every torch with Dynamo)
OPTIMIZE_DDP = {"ddp_optimizer": True, "no_optimization": False}


def data_parallel(model, device, p, optimize_ddp: str = "ddp_optimizer"):
    """Wrap the model in DistributedDataParallel on this replica's device; the API and all-reduce settings.
    Under execution compiled, `optimize_ddp` sets torch._dynamo.config.optimize_ddp (this replica's process
    is its own: the setting reaches no other run)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = device.torch
    ids = [dev.index] if dev.type == "cuda" else None
    wrapped = DDP(model, device_ids=ids, output_device=ids[0] if ids else None, **DDP_SETTINGS)
    replica = device.replica
    allreduce = {"backend": device.dist_backend, **DDP_SETTINGS,
                 "overlap": "each bucket's all-reduce starts during backward, from DDP's autograd hooks",
                 "gradients": "averaged over the replicas (sum / world_size): the mean loss over the global batch",
                 "batchnorm": "per replica (no SyncBatchNorm), as in tf.distribute"}
    if p.execution == "compiled":
        try:
            import torch._dynamo as dynamo

            config = dynamo.config
        except ImportError:  # no Dynamo in this torch: compiled is unsupported before this is reached
            config = None
        if config is not None and hasattr(config, "optimize_ddp"):
            config.optimize_ddp = OPTIMIZE_DDP[optimize_ddp]
            if optimize_ddp == "no_optimization":
                allreduce["overlap"] = ("none: one compiled graph (optimize_ddp=False), DDP's all-reduce after the "
                                        "compiled backward")
            else:
                allreduce["overlap"] += " (Dynamo's DDPOptimizer splits the compiled graph at the bucket boundaries)"
        allreduce["dynamo_optimize_ddp"] = getattr(config, "optimize_ddp", None)
    allreduce["env"] = collective_env()
    api = (f"torch.nn.parallel.DistributedDataParallel({', '.join(f'{k}={v}' for k, v in DDP_SETTINGS.items())}), "
           f"{device.dist_backend}, {replica.world_size} processes (torchrun)")
    return wrapped, api, allreduce


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
