"""The environment a result was measured in: versions, GPUs, CPU, relevant variables.

Framework versions come from package metadata, so nothing here imports a framework.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import sys

from harness import nvml

PACKAGES = ("torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras", "numpy", "nvidia-ml-py", "harness")

#: Environment variables that change what a framework does; recorded in every result.
RELEVANT_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "TF_FORCE_GPU_ALLOW_GROWTH", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "XLA_FLAGS", "TF_GPU_ALLOCATOR",
    "TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "PYTORCH_CUDA_ALLOC_CONF", "NVIDIA_TF32_OVERRIDE",
    "TORCH_CUDNN_V8_API_ENABLED", "TORCHINDUCTOR_CACHE_DIR", "OPENBLAS_CORETYPE",
)


def package_versions() -> dict[str, str | None]:
    """Installed versions of the packages that matter to a result (None where absent)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where readable)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_total_bytes() -> int | None:
    """Physical memory of the host."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def cpu_governor() -> str | None:
    """The CPU frequency governor of cpu0, where Linux exposes it."""
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def capture() -> dict:
    """The framework-free environment: python, packages, CPU, memory, GPUs, driver, variables."""
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "hostname": platform.node(),
        "packages": package_versions(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_governor": cpu_governor(),
        "memory_total_bytes": memory_total_bytes(),
        "driver": nvml.driver_version(),
        "gpus": nvml.gpus(),
        "variables": {k: os.environ[k] for k in RELEVANT_VARIABLES if k in os.environ},
    }
