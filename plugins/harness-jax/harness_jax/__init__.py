"""The JAX backend of harness (entry point `jax` in the `harness.backends` group), a separately installed plugin.

This package holds the declarations only, and imports neither JAX nor Flax nor Optax: everything the core asks
before a worker starts (names, versions, techniques, what cannot run) is answered here from declarations and
package metadata. The worker-side modules (device, gemm, train, step, precision, inputs, resnet50, profile)
import JAX at their top like any import: only a worker ever imports them, through `open_device`, `modules`,
`trainer` and `parts`.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from harness.errors import allocation_failure
from harness.seam.adapter import Device
from harness.seam.backend import TF32_ON_CPU, Backend
from harness.workloads import technique_values

NO_GRAPH_MODE = (
    "JAX has no `graph` mode: a traced step (a jaxpr) is only ever run by compiling it with XLA (jax.jit, which "
    "is execution: compiled); JAX has no executor that runs a traced graph kernel by kernel without compiling "
    "it, as tf.function(jit_compile=False) does (turning XLA's fusion off with flags would still be XLA-compiled "
    "code, not another executor)"
)
NO_CUDA_GRAPH = (
    "JAX has no API that captures a whole step in one CUDA graph and replays it; under jax.jit (execution: "
    "compiled) XLA itself replays runs of kernels through CUDA-graph command buffers "
    "(XLA_FLAGS=--xla_gpu_enable_command_buffer=...), which harness records in api.execution"
)
KERAS_V1_ON_JAX = (
    "model keras_resnet50_v1 is Keras's applications.ResNet50 (v1, conv bias); the jax backend builds only "
    "torchvision's ResNet-50 v1.5 (model: resnet50)"
)
EAGER_TRAINING = (
    "JAX without jax.jit runs the training step primitive by primitive from Python (each primitive its own small "
    "XLA computation), a debugging mode: compare execution compiled for JAX's training speed"
)

#: Messages of XLA allocation failures (XlaRuntimeError / JaxRuntimeError carry the status code as text).
OOM_MESSAGES = (
    "RESOURCE_EXHAUSTED",
    "Out of memory",
    "out of memory",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
)


class JaxBackend(Backend):
    """JAX with Flax (linen) and Optax: gemm, and every training workload with a Flax part, on the CPU and CUDA GPUs."""

    name: ClassVar[str] = "jax"
    distributions: ClassVar[tuple[str, ...]] = ("jax",)
    install_hint: ClassVar[str] = "pip install -e plugins/harness-jax (pulls jax, jaxlib, flax, optax)"
    #: every technique value of gemm (harness.workloads declares them), without `execution: default` (a single
    #: matrix product has no training path to follow: docs/execution.md); a training workload's are derived
    #: (Backend.techniques), `default` included: the trainer resolves it
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {"gemm": technique_values("gemm")}
    modules: ClassVar[dict[str, str]] = {"gemm": "harness_jax.gemm"}
    trainer: ClassVar[str | None] = "harness_jax.train"
    parts: ClassVar[dict[str, str]] = {"resnet50_train": "harness_jax.resnet50:PART",
                                       "gpt_train": "harness_jax.gpt:PART"}
    trains_by_default: ClassVar[bool] = True
    missing_modes: ClassVar[dict[str, str]] = {"graph": NO_GRAPH_MODE, "cuda_graph": NO_CUDA_GRAPH}
    refused_on_cpu: ClassVar[dict[tuple[str, Any], str]] = {("precision", "tf32"): TF32_ON_CPU}

    def unsupported_reason(self, workload: str, params: dict, device: str, options: dict | None = None) -> str | None:
        """Every combination JAX cannot run, known before it is imported (asked again once `auto` is resolved):
        the base class's (techniques, modes JAX lacks, TF32 on the CPU), and Keras's ResNet-50 v1."""
        reason = super().unsupported_reason(workload, params, device, options)
        if reason:
            return reason
        if workload == "resnet50_train" and params.get("model") == "keras_resnet50_v1":
            return KERAS_V1_ON_JAX
        return None

    def worker_env(self, options: dict, probe: bool = False) -> dict[str, str]:
        """No preallocation (else XLA takes 75% of the GPU at start and NVML's used memory means nothing; the
        allocator's peak is right either way), unless the user set it; XLA's C++ logs kept to warnings. A capacity
        probe turns XLA's autotuning off (--xla_gpu_autotune_level=0): it sweeps kernels, which costs seconds."""
        env = {
            "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
            "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"),
        }
        if probe:
            env["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_gpu_autotune_level=0"]))
        return env

    def compile_cache_env(self, directory: str) -> dict[str, str]:
        """JAX's persistent compilation cache in `directory`, every compiled program kept (by default JAX keeps
        only those that took a second or more to compile)."""
        return {"JAX_COMPILATION_CACHE_DIR": directory, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}

    def open_device(self, device: str, cpu_threads: dict) -> Device:
        """Import JAX, size its CPU pool where asked, and resolve the device (`auto`: the first GPU, else the CPU)."""
        # the worker's side: it imports JAX at its top (and this module's messages back)
        from harness_jax.device import JaxDevice

        return JaxDevice(device, cpu_threads)

    def out_of_memory(self, exc: BaseException) -> str | None:
        """Evidence that XLA or the host ran out of memory (RESOURCE_EXHAUSTED and allocator messages), or None."""
        return allocation_failure(exc, (), OOM_MESSAGES)  # jit re-raises with the original as the cause


__all__ = ["EAGER_TRAINING", "NO_CUDA_GRAPH", "NO_GRAPH_MODE", "TF32_ON_CPU", "JaxBackend"]
