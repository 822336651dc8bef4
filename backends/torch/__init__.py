"""The PyTorch backend of harness (entry point `torch` in the `harness.backends` group).

Importing this package does not import torch: the framework is imported inside `execute`, which
runs only in a worker process.
"""

from __future__ import annotations

from typing import Any, ClassVar

from harness.backend import Backend
from harness.errors import OutOfMemory, Unsupported

_PRECISION = ("fp32", "tf32", "amp_fp16", "amp_bf16")
_EXECUTION = ("eager", "graph", "compiled")

#: Messages of allocation failures that torch does not raise as OutOfMemoryError. cuDNN and cuBLAS
#: report a failed workspace allocation near the memory limit as an internal/alloc error
#: (REFERENCE.md: ResNet-50 under bf16 autocast failed with CUDNN_STATUS_INTERNAL_ERROR).
OOM_MESSAGES = (
    "CUDA out of memory",
    "CUDA error: out of memory",
    "CUDNN_STATUS_INTERNAL_ERROR",
    "CUDNN_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "DefaultCPUAllocator: can't allocate memory",
)


CUDA_GRAPH_ON_CPU = "a CUDA graph needs a CUDA GPU; the CPU has none"
KERAS_V1_ON_TORCH = (
    "model keras_resnet50_v1 is Keras's applications.ResNet50 (v1, conv bias); the torch backend builds "
    "only torchvision's ResNet-50 v1.5 (model: resnet50)"
)
GRAPH_WITH_GRAD_SCALER = (
    "a whole-step CUDA graph cannot hold GradScaler: its step reads the inf/NaN check on the CPU "
    "(a synchronization that capture forbids); use amp_bf16, which needs no scaler, or execution eager/compiled"
)


class TorchBackend(Backend):
    """PyTorch (torch, torchvision): gemm and resnet50_train on the CPU and CUDA GPUs."""

    name: ClassVar[str] = "torch"
    aliases: ClassVar[tuple[str, ...]] = ("pytorch",)
    distributions: ClassVar[tuple[str, ...]] = ("torch",)
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {
        "gemm": {
            "precision": ("fp32", "tf32", "fp16", "bf16"),
            "execution": _EXECUTION,
        },
        "resnet50_train": {
            "precision": _PRECISION,
            "memory_format": ("channels_first", "channels_last"),
            "recompute": ("none", "blocks"),
            "execution": _EXECUTION,
        },
    }
    modules: ClassVar[dict[str, str]] = {"gemm": "backends.torch.gemm", "resnet50_train": "backends.torch.resnet50_train"}

    def unsupported_reason(self, workload: str, params: dict, device: str) -> str | None:
        """Combinations known to be impossible before torch is imported (the rest are found in execute)."""
        reason = super().unsupported_reason(workload, params, device)
        if reason:
            return reason
        if device == "cpu" and params.get("precision") == "tf32":
            from backends.torch.precision import TF32_ON_CPU

            return TF32_ON_CPU
        if device == "cpu" and params.get("execution") == "graph":
            return CUDA_GRAPH_ON_CPU
        if workload == "resnet50_train":
            if params.get("model") == "keras_resnet50_v1":
                return KERAS_V1_ON_TORCH
            if params.get("execution") == "graph" and params.get("precision") == "amp_fp16":
                return GRAPH_WITH_GRAD_SCALER
        return None

    def classify_error(self, exc: BaseException) -> str | None:
        """`oom` for torch's and the host's out-of-memory errors (cuDNN/cuBLAS allocation failures too)."""
        from backends.torch.compat import out_of_memory_errors

        oom_types = (MemoryError, OutOfMemory) + out_of_memory_errors()
        seen: set[int] = set()
        current: BaseException | None = exc
        while current is not None and id(current) not in seen:  # torch.compile wraps the original error
            seen.add(id(current))
            if isinstance(current, Unsupported):
                return "unsupported"
            if isinstance(current, oom_types) or any(m in str(current) for m in OOM_MESSAGES):
                return "oom"
            current = current.__cause__ or current.__context__
        return None


__all__ = ["TorchBackend"]
