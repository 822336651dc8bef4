"""The TensorFlow / Keras backend of harness.

Importing this package imports neither TensorFlow nor Keras: they are imported inside `execute`,
which runs only in a worker process.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from harness.backend import Backend

_EXECUTION = ("eager", "graph", "compiled")

#: Messages of allocation failures that TensorFlow raises as some other error type (InternalError and
#: friends, e.g. a GPU-to-host copy into memory that could not be allocated). GPU ones not yet seen here.
_OOM_MESSAGES = (
    "OOM when allocating",
    "out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "failed to allocate memory",
    "Dst tensor is not initialized",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
)


class TensorFlowBackend(Backend):
    """Runs the neutral workloads with TensorFlow and Keras (Keras 2 on TF 2.12-2.15, Keras 3 on 2.16+)."""

    name: ClassVar[str] = "tensorflow"
    aliases: ClassVar[tuple[str, ...]] = ("tf",)
    distributions: ClassVar[tuple[str, ...]] = ("tensorflow", "tensorflow-cpu", "tf-nightly")
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {
        "gemm": {
            "precision": ("fp32", "tf32", "fp16", "bf16"),
            "execution": _EXECUTION,
        },
        "resnet50_train": {
            "precision": ("fp32", "tf32", "amp_fp16", "amp_bf16"),
            "memory_format": ("channels_first", "channels_last"),
            "recompute": ("none", "blocks"),
            "execution": _EXECUTION,
        },
    }
    modules: ClassVar[dict[str, str]] = {"gemm": "backends.tensorflow.gemm", "resnet50_train": "backends.tensorflow.resnet50_train"}

    def unsupported_reason(self, workload: str, params: dict, device: str) -> str | None:
        """Combinations known to be impossible before TensorFlow is imported."""
        reason = super().unsupported_reason(workload, params, device)
        if reason:
            return reason
        if device == "cpu" and params.get("precision") == "tf32":
            return "TF32 is a tensor-core format of NVIDIA Ampere and newer GPUs; the CPU has none"
        if workload == "resnet50_train" and params.get("model") == "keras_resnet50_v1" and params.get("recompute") == "blocks":
            from backends.tensorflow.resnet50_train import KERAS_V1_RECOMPUTE_REASON

            return KERAS_V1_RECOMPUTE_REASON
        return None

    def classify_error(self, exc: BaseException) -> str | None:
        """`oom` for TensorFlow's ResourceExhaustedError, an allocation failure message, or MemoryError."""
        if isinstance(exc, MemoryError):
            return "oom"
        tf = sys.modules.get("tensorflow")  # never import it here: if it was not imported, it raised nothing
        if tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError):
            return "oom"
        if type(exc).__name__ == "ResourceExhaustedError":
            return "oom"
        text = str(exc)
        if any(message.lower() in text.lower() for message in _OOM_MESSAGES):
            return "oom"
        return None


__all__ = ["TensorFlowBackend"]
