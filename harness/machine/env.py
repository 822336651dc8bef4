"""The environment a result was measured in: versions, GPUs, CPU, relevant variables; captured as the JSON
object a record keeps (`capture`) and read back typed (`Environment`).

Framework versions come from package metadata, so nothing here imports a framework.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import sys
from typing import Any

from harness.fields import ListOf, Number, RecordPart
from harness.machine import nvml

PACKAGES = ("torch", "torchvision", "tensorflow", "tensorflow-cpu", "keras", "numpy", "nvidia-ml-py", "harness")

#: Environment variables that change what a framework does; recorded in every result.
RELEVANT_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "TF_FORCE_GPU_ALLOW_GROWTH", "TF_ENABLE_ONEDNN_OPTS", "TF_XLA_FLAGS", "XLA_FLAGS", "TF_GPU_ALLOCATOR",
    "TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND", "PYTORCH_CUDA_ALLOC_CONF", "NVIDIA_TF32_OVERRIDE",
    "TORCH_CUDNN_V8_API_ENABLED", "TORCHINDUCTOR_CACHE_DIR", "OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "CUDA_CACHE_PATH", "CUDA_CACHE_DISABLE",
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


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (runnable and waiting threads), where the OS gives them."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def usable_cpus() -> int | None:
    """The cores this process may run on (its affinity mask; a container's CPU set), else the CPU count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _session_of(pid) -> int | None:
    """The session id of a process (a run's worker, or its launcher and ranks, lead one); None where unknown."""
    try:
        return os.getsid(int(pid))
    except (OSError, TypeError, ValueError):
        return None


def gpu_utilization() -> dict[str, float] | None:
    """Each GPU's utilisation now (percent of time a kernel ran, NVML's last sample), by NVML index; None
    without NVML."""
    lib = nvml.nvml()
    if lib is None:
        return None
    out: dict[str, float] = {}
    try:
        count = lib.nvmlDeviceGetCount()
    except Exception:
        return None
    for i in range(count):
        try:
            out[str(i)] = float(lib.nvmlDeviceGetUtilizationRates(lib.nvmlDeviceGetHandleByIndex(i)).gpu)
        except Exception:
            continue
    return out


def gpu_processes(exclude: tuple[int, ...] | None = None) -> dict[str, list[dict]] | None:
    """Other compute processes on each GPU, by NVML index: pid and GPU memory; None without NVML.

    This process (a worker holds its own CUDA context) and its parent (the runner) are left out.
    Inside a container NVML may list processes of other containers, whose pids mean nothing here:
    they still count, because they share the GPU.
    """
    lib = nvml.nvml()
    if lib is None:
        return None
    skip = set(exclude if exclude is not None else (os.getpid(), os.getppid()))
    own_session = _session_of(os.getpid()) if exclude is None else None
    out: dict[str, list[dict]] = {}
    try:
        count = lib.nvmlDeviceGetCount()
    except Exception:
        return None
    for i in range(count):
        found: list[dict] = []
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(i)
            procs = list(lib.nvmlDeviceGetComputeRunningProcesses(handle))
        except Exception:
            continue
        for proc in procs:
            pid = getattr(proc, "pid", None)
            if pid in skip or (own_session is not None and _session_of(pid) == own_session):
                continue  # this run's own processes: a data-parallel run's other ranks share its session
            used = getattr(proc, "usedGpuMemory", None)
            found.append({"pid": pid, "used_memory_bytes": int(used) if isinstance(used, int) else None})
        out[str(i)] = found
    return out


def machine_state() -> dict:
    """What else the machine was doing: load average against usable cores, other GPU processes, governor.

    Captured by `harness env` and, at the end of every run, by its worker (so each record says
    whether it was measured on a busy machine; harness.machine.envcheck.busy_reasons reads it).
    """
    return {
        "load_average": load_average(),
        "cpu_usable": usable_cpus(),
        "cpu_governor": cpu_governor(),
        "gpu_processes": gpu_processes(),
        "gpu_utilization": gpu_utilization(),
    }


def capture() -> dict:
    """The framework-free environment: python, packages, CPU, memory, GPUs, driver, variables, machine state.

    The framework's own thread pools are recorded by the backend under `env.framework.threads`.
    """
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "executable": sys.executable,
        "platform": platform.platform(),
        "hostname": platform.node(),
        "packages": package_versions(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": memory_total_bytes(),
        "driver": nvml.driver_version(),
        "gpus": nvml.gpus(),
        "variables": {k: os.environ[k] for k in RELEVANT_VARIABLES if k in os.environ},
        **machine_state(),
    }


class GpuInfo(RecordPart):
    """One GPU of the host as NVML listed it (`env.gpus`)."""

    index: int | None = None
    name: str | None = None
    memory_total_bytes: int | None = None


class FrameworkEnv(RecordPart):
    """The framework's own side of `env` (`env.framework`, the device's identity): versions, settings, its GPU."""

    gpu_memory_bytes: int | None = None
    gpu_multiprocessors: int | None = None


class Isolation(RecordPart):
    """How a run kept the host to itself while timed (`env.isolation`, harness.worker.hostlock.timing_lock)."""

    #: exclusive, shared (measure.share_host), unlocked (the lock could not be taken), not_taken (several nodes)
    mode: str | None = None
    reason: str | None = None
    #: seconds the run waited for another session's timed run to end (not the run's time)
    waited_s: Number | None = None


class Environment(RecordPart):
    """A record's `env`: what `capture()` saw at the end of the run, the framework's side (`framework`) and how the
    host was kept (`isolation`); what the runner saw (`captured_by: runner`) where the worker wrote none."""

    hostname: str | None = None
    cpu_count: int | None = None
    cpu_usable: int | None = None
    cpu_governor: str | None = None
    #: the 1, 5 and 15 minute load averages
    load_average: ListOf(Number | None) | None = None
    driver: str | None = None
    packages: dict[str, str | None] | None = None
    gpus: ListOf(GpuInfo) | None = None
    #: other compute processes on each GPU, by NVML index
    gpu_processes: dict[str, list[Any] | None] | None = None
    #: each GPU's utilisation in percent, by NVML index
    gpu_utilization: dict[str, Number | None] | None = None
    variables: dict[str, str] | None = None
    framework: FrameworkEnv | None = None
    isolation: Isolation | None = None
    captured_by: str | None = None

    def variable(self, name: str) -> str:
        """An environment variable the run saw ('' where unset or not recorded)."""
        return (self.variables or {}).get(name) or ""

    def gpu_memory_bytes(self, index: int) -> int | None:
        """The memory of the host's GPU `index` (NVML's numbering), as NVML listed it; None where not listed."""
        return next((g.memory_total_bytes for g in self.gpus or () if g.index == index), None)
