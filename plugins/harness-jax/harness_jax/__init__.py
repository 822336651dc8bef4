"""The JAX backend of harness (entry point `jax` in the `harness.backends` group), a separately installed plugin.

Importing this package imports neither JAX nor Flax nor Optax: they are imported in `open_device` and
`prepare`, which run only in a worker process. Everything the core asks before a worker starts (names,
versions, techniques, what cannot run) is answered here from declarations and package metadata.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

from harness.errors import allocation_failure
from harness.seam.adapter import Device
from harness.seam.backend import Backend
from harness.workloads import technique_values

TF32_ON_CPU = "TF32 is a tensor-core format of NVIDIA Ampere and newer GPUs; the CPU has none"
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
    """JAX with Flax (linen) and Optax: gemm and resnet50_train on the CPU and CUDA GPUs."""

    name: ClassVar[str] = "jax"
    distributions: ClassVar[tuple[str, ...]] = ("jax",)
    install_hint: ClassVar[str] = "pip install -e plugins/harness-jax (pulls jax, jaxlib, flax, optax)"
    #: every technique value of both workloads (harness.workloads declares them); `execution: default` for
    #: resnet50_train only (a single matrix product has no training path to follow: docs/execution.md)
    workloads: ClassVar[dict[str, dict[str, tuple[Any, ...]]]] = {
        name: technique_values(name, default_execution=name == "resnet50_train") for name in ("gemm", "resnet50_train")
    }
    modules: ClassVar[dict[str, str]] = {"gemm": "harness_jax.gemm", "resnet50_train": "harness_jax.resnet50_train"}

    def unsupported_reason(self, workload: str, params: dict, device: str, options: dict | None = None) -> str | None:
        """Every combination JAX cannot run, known before it is imported (asked again once `auto` is resolved)."""
        reason = super().unsupported_reason(workload, params, device, options)
        if reason:
            return reason
        execution = params.get("execution")
        if execution == "graph":
            return NO_GRAPH_MODE
        if execution == "cuda_graph":
            return NO_CUDA_GRAPH
        if device == "cpu" and params.get("precision") == "tf32":
            return TF32_ON_CPU
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
        # the worker's side, which imports this module's messages back
        from harness_jax.device import JaxDevice

        return JaxDevice(device, cpu_threads)

    def out_of_memory(self, exc: BaseException) -> str | None:
        """Evidence that XLA or the host ran out of memory (RESOURCE_EXHAUSTED and allocator messages), or None."""
        return allocation_failure(exc, (), OOM_MESSAGES)  # jit re-raises with the original as the cause


__all__ = ["JaxBackend"]
