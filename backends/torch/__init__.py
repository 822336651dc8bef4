"""The PyTorch backend of harness (entry point `torch` in the `harness.backends` group).

Its modules come in two kinds. The declarations (this package's `__init__`, `launcher`), which the parent
process imports, never import torch. The worker's side (`device`, `train` and the modules it builds the step
from, the model parts, `gemm`, `profile`, `compat`) imports torch at module top like any other import: only a
worker ever imports those modules, through `open_device` and `prepare`.
"""

from __future__ import annotations

import os
import sys
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from backends.torch.launcher import torchrun_launch
from harness.errors import ONEDNN_ALLOCATION, allocation_failure
from harness.seam.adapter import Device
from harness.seam.backend import CUDA_GRAPH_ON_CPU, TF32_ON_CPU, Backend
from harness.seam.distributed import Cluster, Launch, Replica
from harness.seam.runspec import RunSpec
from harness.workloads import technique_values

#: Messages of allocation failures that torch does not raise as OutOfMemoryError. cuDNN and cuBLAS
#: report a failed workspace allocation near the memory limit as an internal/alloc error
#: (on an H200, ResNet-50 under bf16 autocast failed near the limit with CUDNN_STATUS_INTERNAL_ERROR).
OOM_MESSAGES = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "CUDNN_STATUS_INTERNAL_ERROR",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
    "DefaultCPUAllocator: not enough memory",  # torch 2.0's wording
    "Cannot allocate memory",  # ENOMEM, as the C library words it (a host allocation under --memory-limit)
)

NO_GRAPH_MODE = (
    "torch has no `graph` mode: nothing in torch runs a whole training step as a traced graph launched "
    "kernel by kernel without compiling it, as tf.function does; its whole-step modes are cuda_graph "
    "(capture once, replay) and compiled (torch.compile of the whole step)"
)
BATCH_OF_ONE = (
    "torch's BatchNorm cannot train on a batch of one image (\"Expected more than 1 value per channel when "
    "training\"): its batch statistics need at least 2 values per channel; use batch_size 2 or more"
)
KERAS_V1_ON_TORCH = (
    "model keras_resnet50_v1 is Keras's applications.ResNet50 (v1, conv bias); the torch backend builds "
    "only torchvision's ResNet-50 v1.5 (model: resnet50)"
)
GRAPH_WITH_GRAD_SCALER = (
    "a whole-step CUDA graph cannot hold GradScaler: its step reads the inf/NaN check on the CPU "
    "(a synchronization that capture forbids); use loss_scale: static (no host sync), amp_bf16, which needs no "
    "scaler, or execution eager/compiled"
)


CUDA_GRAPH_DATA_PARALLEL = (
    "a whole-step CUDA graph of a DistributedDataParallel step is not mapped: DDP's all-reduce buckets are "
    "launched from autograd hooks, which capture needs set up in a particular way (static_graph, a side-stream "
    "warm-up per rank); use execution eager or compiled with replicas > 1"
)


class TorchOptions(BaseModel):
    """The torch backend's options (`options: {torch: {...}}`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: torch.compile's mode for `execution: compiled`.
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    #: With `replicas > 1` and `execution: compiled`: `torch._dynamo.config.optimize_ddp`. `ddp_optimizer`
    #: (torch's default): Dynamo splits the compiled graph at DDP's bucket boundaries so each bucket's
    #: all-reduce overlaps the rest of the backward. `no_optimization`: one graph, no split; DDP's all-reduce
    #: runs after the compiled backward, without overlap. Left out of a record's options at its default.
    optimize_ddp: Literal["ddp_optimizer", "no_optimization"] = "ddp_optimizer"
    #: torch.backends.cudnn.benchmark on a GPU. None (the default): harness turns it on in eager, compiled and
    #: cuda_graph (each convolution's fastest algorithm) and follows torch's own default (off) under
    #: `execution: default`; true or false sets it in every mode. Recorded in api.cudnn and
    #: env.framework.cudnn_benchmark. Left out of a record's options at its default.
    cudnn_benchmark: bool | None = None


class TorchBackend(Backend):
    """PyTorch (torch, torchvision): gemm, and every training workload with a torch model part (resnet50_train's
    is this backend's own), on the CPU and CUDA GPUs."""

    name: ClassVar[str] = "torch"
    aliases: ClassVar[tuple[str, ...]] = ("pytorch",)
    distributions: ClassVar[tuple[str, ...]] = ("torch",)
    install_hint: ClassVar[str] = "pip install 'harness[torch]'"
    #: gemm's technique values (harness.workloads declares them), without `execution: default` (a single matrix
    #: product has no training path to follow: docs/execution.md); a training workload's come from techniques()
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {"gemm": technique_values("gemm")}
    modules: ClassVar[dict[str, str]] = {"gemm": "backends.torch.gemm"}
    trainer: ClassVar[str | None] = "backends.torch.train"
    parts: ClassVar[dict[str, str]] = {"resnet50_train": "backends.torch.resnet50:PART",
                                       "gpt_train": "backends.torch.gpt:PART"}
    #: `execution: default` is the plain Python training loop, what a torch user writes
    trains_by_default: ClassVar[bool] = True
    missing_modes: ClassVar[dict[str, str]] = {"graph": NO_GRAPH_MODE}
    refused_on_cpu: ClassVar[dict[tuple[str, Any], str]] = {("precision", "tf32"): TF32_ON_CPU,
                                                           ("execution", "cuda_graph"): CUDA_GRAPH_ON_CPU}
    options_model: ClassVar[type[BaseModel]] = TorchOptions
    #: torch initializes CUDA lazily, at the first device call: a probe's worker imports these ahead
    preload_modules: ClassVar[tuple[str, ...]] = ("torch", "torchvision")
    #: replicas > 1: DistributedDataParallel, one process per replica, launched through torchrun
    data_parallel: ClassVar[bool] = True

    #: optimize_ddp and cudnn_benchmark came later: left out at their defaults, so earlier records keep their run_key
    keyed_off_default: ClassVar[tuple[str, ...]] = ("optimize_ddp", "cudnn_benchmark")

    def unsupported_reason(self, workload: str, params: dict, device: str, options: dict | None = None) -> str | None:
        """Every combination torch cannot run, known before it is imported (asked again once `auto` is resolved):
        the base class's refusals, the trainer's whole-step CUDA graph limits, and ResNet-50's own."""
        reason = super().unsupported_reason(workload, params, device, options)
        if reason:
            return reason
        if workload == "resnet50_train":
            if params.get("model") == "keras_resnet50_v1":
                return KERAS_V1_ON_TORCH
            if params.get("batch_size") == 1:
                return BATCH_OF_ONE
        if params.get("execution") == "cuda_graph":
            if params.get("precision") == "amp_fp16" and params.get("loss_scale", "dynamic") != "static":
                return GRAPH_WITH_GRAD_SCALER
            if int(params.get("replicas") or 1) > 1:
                return CUDA_GRAPH_DATA_PARALLEL
        return None

    def compile_cache_env(self, directory: str) -> dict[str, str]:
        """Inductor's caches (its FX graph cache and, where the release has it, AOTAutograd's) and Triton's
        kernel cache, autotuning choices included, in `directory`. Without this, torch.compile shares them
        through one folder per user under the system's temporary directory: across processes and sessions, so
        a "first" step could be warm from an earlier run."""
        return {"TORCHINDUCTOR_CACHE_DIR": os.path.join(directory, "inductor"),
                "TRITON_CACHE_DIR": os.path.join(directory, "triton"),
                "TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}

    def launch(self, spec: RunSpec, worker: list[str], cluster: Cluster) -> Launch:
        """torchrun (python -m torch.distributed.run) of this node's replicas, one process each
        (backends.torch.launcher)."""
        return torchrun_launch(spec, worker, cluster)

    def open_replica(self, device: str, cpu_threads: dict, replica: Replica) -> Device:
        """This replica's device (cuda:K+local_rank, or the CPU) and torch.distributed's process group
        (NCCL on a GPU, gloo on the CPU), joined through torchrun's environment."""
        # the worker's side: loaded in a worker only
        from backends.torch.device import TorchReplicaDevice

        return TorchReplicaDevice(device, cpu_threads, replica)

    def open_device(self, device: str, cpu_threads: dict) -> Device:
        """Import torch, set its thread pools, and resolve the device (`auto`: the first CUDA GPU, else the CPU)."""
        # the worker's side: loaded in a worker only
        from backends.torch.device import TorchDevice

        return TorchDevice(device, cpu_threads)

    def out_of_memory(self, exc: BaseException) -> str | None:
        """Evidence that torch or the host ran out of memory (cuDNN/cuBLAS allocation failures too), or None."""
        hit = allocation_failure(exc, out_of_memory_errors(), OOM_MESSAGES)  # torch.compile wraps the original
        if hit is None and os.environ.get("HARNESS_MEMORY_LIMIT_BYTES"):
            # under a host memory limit (--memory-limit), oneDNN's backward reports a buffer it could not
            # allocate as a primitive it could not create (seen at the edge of a capacity search on the CPU)
            hit = allocation_failure(exc, (), ONEDNN_ALLOCATION)
        return hit


def out_of_memory_errors() -> tuple[type, ...]:
    """The exception classes torch raises when an allocator runs out of memory.

    torch.cuda.OutOfMemoryError exists in every supported release; torch.OutOfMemoryError (also
    raised by other accelerators) was added later, as the same class or a base of it. Read from
    an already-imported torch only: classifying an error must not import torch.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return ()
    found = []
    for owner in (torch, getattr(torch, "cuda", None)):
        cls = getattr(owner, "OutOfMemoryError", None)
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    return tuple(found)


__all__ = ["TorchBackend"]
