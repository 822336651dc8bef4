"""Devices as JAX sees them: neutral names, the clock, the allocator's peak, matmul precision, environment.

JAX dispatches asynchronously (on the CPU too) and has no call that waits for everything queued on a
device, so the clock waits on the last step's outputs: each workload's step hands them to `JaxDevice.hold`,
and `jax.block_until_ready` on them returns once that step, and so every step before it (each step reads
the previous one's outputs, and a device runs its work in order), has finished.
"""

from __future__ import annotations

import importlib.metadata as md
import os
from typing import Any, Callable

import jax

from harness.errors import Unsupported
from harness.machine.devices import gpu_index, normalize_device
from harness.machine.env import cpu_model
from harness.seam.adapter import DeviceDefaults
from harness.timing.loop import WallClock
from harness_jax import TF32_ON_CPU, profile

#: Environment variables that change what JAX/XLA does, recorded with each run.
ENV_VARIABLES = (
    "XLA_FLAGS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "JAX_PLATFORMS",
    "JAX_ENABLE_X64",
    "JAX_DEFAULT_MATMUL_PRECISION",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "TF_CPP_MIN_LOG_LEVEL",
)

SYNC_API = "jax.block_until_ready(the last step's outputs), then time.perf_counter"


#: The lowest compute capability jaxlib's CUDA plugins run on (JAX's installation notes: SM 5.2, Maxwell).
JAXLIB_MIN_CAPABILITY = (5, 2)


def gpus() -> list:
    """The GPUs JAX sees ([] when its CUDA plugin is absent or finds none)."""
    try:
        return list(jax.devices("gpu"))
    except RuntimeError:  # "Unknown backend: 'gpu' requested, but no platforms ... are present"
        return []


def resolve(name: str) -> tuple[str, Any]:
    """(neutral name, jax.Device): `auto` is the first GPU JAX sees, else the CPU.

    A `cuda:N` JAX does not see is Unsupported (not a crash), naming how many GPUs it sees.
    """
    neutral = normalize_device(name)
    found = gpus()
    if neutral == "auto":
        neutral = "cuda:0" if found else "cpu"
    if neutral == "cpu":
        return "cpu", jax.devices("cpu")[0]
    index = gpu_index(neutral)
    if index is None or index >= len(found):
        raise Unsupported(f"device {neutral} is not present: JAX sees {len(found)} GPU{'' if len(found) == 1 else 's'}"
                          + ("" if found else f" (jaxlib {jax.__version__} has no CUDA plugin here, or no GPU)"))
    return neutral, found[index]


def set_threads(cpu_threads: dict) -> dict:
    """Size XLA's CPU pool where the scenario asks; the values in force.

    JAX has no thread-count setting: XLA's CPU client sizes its intra-op pool from the cores the process
    may run on, once, when the backend starts. So `intra_op: N` restricts this worker's CPU affinity to N
    of its cores before JAX starts (the Python thread shares them); `inter_op` has no XLA counterpart and
    is recorded as not applied. Must run before the first jax.devices() of the process (a worker is fresh).
    """
    out: dict[str, Any] = {"intra_op": None, "inter_op": None, "api": "XLA's default: one thread per usable core"}
    intra = cpu_threads.get("intra_op")
    if intra:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, cores[: int(intra)])
        out["intra_op"] = len(os.sched_getaffinity(0))
        out["api"] = f"os.sched_setaffinity(0, {out['intra_op']} cores) before XLA's CPU client starts"
    if cpu_threads.get("inter_op"):
        out["inter_op_not_applied"] = int(cpu_threads["inter_op"])
    return out


def device_name(device) -> str:
    """What the device is: `NVIDIA H200`, or the CPU's model name."""
    if device.platform == "cpu":
        return cpu_model() or "cpu"
    return str(device.device_kind)


def compute_capability(device) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device as jaxlib reports it; None for the CPU or where it cannot say."""
    value = getattr(device, "compute_capability", None)
    try:
        major, minor = str(value).split(".")[:2]
        return int(major), int(minor)
    except (ValueError, TypeError):
        return None


def set_matmul_precision(precision: str, device) -> str:
    """Set JAX's default matmul/conv precision from the neutral precision; return the API as called.

    `tf32`: "tensorfloat32" (float32 operands through TF32 tensor cores; Ampere+ GPUs only). Everything
    else: "highest", so fp32 never silently rounds to TF32 (XLA's default precision on a GPU does) and
    the float32 parts of mixed precision (the classifier, the loss) stay float32.
    """
    if precision == "tf32":
        if device.platform == "cpu":
            raise Unsupported(TF32_ON_CPU)
        cc = compute_capability(device)
        if cc is not None and cc < (8, 0):
            raise Unsupported(f"TF32 is a tensor-core format of NVIDIA Ampere and newer GPUs (compute capability "
                              f"8.0+); this GPU is {cc[0]}.{cc[1]}")
    value = "tensorfloat32" if precision == "tf32" else "highest"
    jax.config.update("jax_default_matmul_precision", value)
    return f"jax.config.update('jax_default_matmul_precision', {value!r})"


def versions() -> dict:
    """Installed versions of JAX and the libraries the backend uses (package metadata)."""
    out = {}
    for name in ("jax", "jaxlib", "flax", "optax", "jax-cuda13-plugin", "jax-cuda13-pjrt", "jax-cuda12-plugin",
                 "jax-cuda12-pjrt", "numpy", "ml_dtypes"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            if not name.startswith("jax-cuda"):
                out[name] = None
    return out


def environment(device) -> dict:
    """The framework side of the record's `env`: versions, XLA's platform, settings in force, variables."""
    env: dict[str, Any] = {"jax": jax.__version__, **versions()}
    try:
        # jax.extend's backend API moved between releases: informative only, so tried here
        from jax.extend.backend import get_backend

        backend = get_backend(device.platform)
        env["xla_platform"] = backend.platform
        env["xla_platform_version"] = backend.platform_version
    except Exception:  # noqa: BLE001 - informative only
        env["xla_platform"] = device.platform
    env["default_matmul_precision"] = jax.config.jax_default_matmul_precision
    env["enable_x64"] = bool(jax.config.jax_enable_x64)
    env["gpus_visible"] = len(gpus())
    if device.platform != "cpu":
        cc = compute_capability(device)
        env["gpu_compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
        stats = device.memory_stats() or {}
        env["xla_allocator_limit_bytes"] = stats.get("bytes_limit")
        env["gpu_memory_bytes"] = None  # JAX does not say; the core reads the GPU's total from NVML
        env["gpu_multiprocessors"] = getattr(device, "core_count", None)
    env["variables"] = {name: os.environ[name] for name in ENV_VARIABLES if name in os.environ}
    return env


class JaxDevice(DeviceDefaults):
    """A resolved device as JAX sees it (harness.seam.adapter.Device)."""

    def __init__(self, name: str, cpu_threads: dict):
        self.threads = set_threads(cpu_threads)  # before JAX's CPU client starts (resolve starts it)
        self.neutral, self.jax = resolve(name)
        self._outputs: Any = None

    @property
    def is_gpu(self) -> bool:
        """Whether the device is a GPU."""
        return self.jax.platform != "cpu"

    def check_build(self) -> list[str]:
        """On a GPU: whether this jaxlib can run on it. XLA compiles every kernel for the GPU it runs on (its own
        LLVM and ptxas), so jaxlib has no list of architectures to miss; it has a lowest compute capability
        (`JAXLIB_MIN_CAPABILITY`), below which the run is Unsupported."""
        capability = compute_capability(self.jax) if self.is_gpu else None
        if capability is None or tuple(capability) >= JAXLIB_MIN_CAPABILITY:
            return []
        low = ".".join(map(str, JAXLIB_MIN_CAPABILITY))
        raise Unsupported(f"jaxlib {versions().get('jaxlib')} cannot run on {self.neutral} ({device_name(self.jax)}): "
                          f"the GPU has compute capability {capability[0]}.{capability[1]}, and jaxlib's CUDA "
                          f"support starts at {low}")

    # --- what the workloads call ------------------------------------------------------------------

    def hold(self, outputs: Any) -> None:
        """Keep the last step's outputs: the clock waits on them (see the module's docstring)."""
        self._outputs = outputs

    def sync(self) -> None:
        """Wait until the last step handed to `hold` has finished on the device."""
        if self._outputs is not None:
            jax.block_until_ready(self._outputs)

    def put(self, array):
        """A host array on this device (committed: computations on it run here)."""
        return jax.device_put(array, self.jax)

    # --- harness.seam.adapter.Device -------------------------------------------------------------------

    def identity(self) -> dict:
        """The device's identity fields, the thread settings in force among its `env`."""
        env = environment(self.jax)
        env["threads"] = self.threads
        return {"device": self.neutral, "device_name": device_name(self.jax), "framework_version": jax.__version__,
                "env": env}

    def clock(self):
        """A wall clock read after the last step's outputs are ready (sync)."""
        return WallClock(self.sync), SYNC_API

    def scope(self):
        """Arrays created without a device (parameter init, constants) land on this device."""
        return jax.default_device(self.jax)

    def reset_peak(self) -> None:
        """XLA's allocator has no peak reset: the peak read afterwards is the worker's whole run (model build and
        compile included), which in a fresh worker is the run's own peak."""
        self.sync()

    def peak_allocated_bytes(self) -> int | None:
        """XLA's allocator peak (`peak_bytes_in_use` of device.memory_stats()); None on the CPU, which keeps none."""
        stats = self.jax.memory_stats()
        if not stats or "peak_bytes_in_use" not in stats:
            return None
        return int(stats["peak_bytes_in_use"])

    def profile(self, step: Callable[[], Any], steps: int, trace_dir: str | None):
        """jax.profiler around `steps` more steps (harness_jax.profile): this GPU's stream kernels, or XLA's
        ops on the CPU."""
        return profile.capture(step, self.sync, self.jax.id if self.is_gpu else None, steps, trace_dir)

    def after_timing(self, step: Callable[[], Any], timing, params, ctx) -> dict:
        """No figures; the warning that `cpu_threads.inter_op` was not applied, where it was asked for."""
        if self.threads.get("inter_op_not_applied"):
            ctx.warnings.append("cpu_threads.inter_op was not applied: XLA has no inter-op thread pool setting")
        return {}
