"""Devices as TensorFlow sees them: memory growth, neutral names, the clock, allocator peaks, TF32, env.

A data-parallel replica's devices are in backends.tensorflow.replicas; the step a device runs (tf.function, XLA,
strategy.run) is built in backends.tensorflow.step."""

from __future__ import annotations

import os
from dataclasses import dataclass

import tensorflow as tf

from backends.tensorflow import compat, profile
from harness.errors import Unsupported
from harness.machine.env import cpu_model
from harness.seam.adapter import DeviceDefaults
from harness.seam.backend import TF32_ON_CPU
from harness.seam.cudabuild import check_cuda_build
from harness.timing.loop import WallClock

#: Environment variables that change what TensorFlow does, recorded with each run.
ENV_VARIABLES = (
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_XLA_FLAGS",
    "XLA_FLAGS",
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_USE_LEGACY_KERAS",
    "TF_CPP_MIN_LOG_LEVEL",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "TF_GPU_ALLOCATOR",
)


@dataclass(frozen=True)
class Placement:
    """A resolved device: the neutral name (`cpu`, `cuda:N`) and TensorFlow's (`/CPU:0`, `/GPU:N`)."""

    neutral: str
    tf_name: str

    @property
    def is_gpu(self) -> bool:
        """Whether the device is a GPU."""
        return self.neutral.startswith("cuda:")

    @property
    def memory_name(self) -> str:
        """The name get_memory_info / reset_memory_stats take (`GPU:N`, `CPU:0`)."""
        return self.tf_name.lstrip("/")


def enable_memory_growth() -> None:
    """Turn memory growth on for every GPU, so the allocator peak is what the run used, not all memory.

    Must run before the first op touches a GPU; afterwards TensorFlow refuses (RuntimeError), and the
    worker's TF_FORCE_GPU_ALLOW_GROWTH=true (TensorFlowBackend.worker_env) has already done the same.
    """
    if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "false":
        return  # the run asked for TensorFlow's default allocator (options: {tensorflow: {memory_growth: false}})
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:
            pass  # GPUs already initialized in this process; growth was set then or by the env variable


def resolve(device: str) -> Placement:
    """The device to run on: `auto` is the first GPU if TensorFlow sees one, else the CPU.

    A run on one GPU makes only that GPU visible to TensorFlow (tf.config.set_visible_devices), as the
    data-parallel workers do: otherwise TensorFlow opens a context on every GPU and its device sync
    waits on all of them, while torch touches only the GPU it runs on. In a process whose runtime has
    started already (tests run several runs in one), visibility cannot change: the GPU keeps the
    logical index it has there.
    """
    gpus = tf.config.list_physical_devices("GPU")  # does not initialize the GPUs (memory growth may follow)
    if device == "auto":
        device = "cuda:0" if gpus else "cpu"
    if device == "cpu":
        return Placement("cpu", "/CPU:0")
    if device.startswith("cuda:"):
        index = int(device.split(":", 1)[1])
        if index >= len(gpus):
            raise Unsupported(f"device {device} asked for, but TensorFlow sees {len(gpus)} GPU(s)")
        if len(gpus) > 1:
            try:
                tf.config.set_visible_devices([gpus[index]], "GPU")
            except RuntimeError:  # the runtime has started in this process: find where the GPU is
                visible = tf.config.get_visible_devices("GPU")
                if gpus[index] not in visible:
                    raise Unsupported(f"device {device}: TensorFlow's runtime started in this process without "
                                      "it, and its visible GPUs cannot change now") from None
                return Placement(device, f"/GPU:{visible.index(gpus[index])}")
            return Placement(device, "/GPU:0")
        return Placement(device, f"/GPU:{index}")
    raise Unsupported(f"device {device!r} is not a neutral device name (auto, cpu, cuda:N)")


def device_name(placement: Placement) -> str | None:
    """What the device is: the GPU's name from TensorFlow, or the CPU's model name."""
    if placement.is_gpu:
        index = int(placement.neutral.split(":", 1)[1])
        gpus = tf.config.list_physical_devices("GPU")
        try:
            return tf.config.experimental.get_device_details(gpus[index]).get("device_name")
        except (IndexError, ValueError):
            return None
    return cpu_model_name()


def build_archs_and_capability(placement: Placement) -> tuple[list[str], tuple[int, int] | None]:
    """(the CUDA architectures this TensorFlow was built for, the GPU's compute capability); ([], None) where
    TensorFlow does not say (a build without CUDA, a GPU it gives no details of)."""
    archs = list(tf.sysconfig.get_build_info().get("cuda_compute_capabilities") or [])
    index = int(placement.neutral.split(":", 1)[1])
    try:
        capability = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[index]).get(
            "compute_capability")
    except (IndexError, ValueError):
        capability = None
    return archs, tuple(capability) if capability else None


def cpu_model_name() -> str | None:
    """The CPU's model name (harness.machine.env reads /proc/cpuinfo)."""
    return cpu_model() or None


def clock() -> tuple[WallClock, str]:
    """A WallClock that synchronizes all devices before each read, and the sync API's name."""
    sync, api = compat.device_sync()
    return WallClock(sync), api


def set_tensor_float_32(precision: str, placement: Placement) -> str:
    """Set TF32 explicitly from the precision (TF turns it on by default on Ampere+); return the API called.

    Raises Unsupported for `tf32` on the CPU, which has no TF32 arithmetic.
    """
    if precision == "tf32" and not placement.is_gpu:
        raise Unsupported(TF32_ON_CPU)
    enabled = precision == "tf32"
    tf.config.experimental.enable_tensor_float_32_execution(enabled)
    return f"tf.config.experimental.enable_tensor_float_32_execution({enabled})"


class AllocatorPeak:
    """TensorFlow's allocator peak for one device: reset before the first step, read after the last."""

    def __init__(self, placement: Placement):
        self.name = placement.memory_name

    def reset(self) -> None:
        """Start the device's allocator peak over."""
        compat.reset_memory_stats(self.name)

    def peak_bytes(self) -> int | None:
        """Peak bytes since reset(); None where TF cannot say.

        TF's CPU allocator leaves small tensors (64 KiB and below, seen on TF 2.12 and 2.21) out of
        its count, so a zero peak means "not measured", not "no memory".
        """
        peak = compat.peak_memory_bytes(self.name)
        return peak or None


def identity(placement: Placement) -> dict:
    """The record fields that say where and with what a run ran, the same for every workload."""
    return {"device": placement.neutral, "device_name": device_name(placement),
            "framework_version": tf.__version__, "env": environment()}


def set_threads(cpu_threads: dict) -> dict:
    """Set TensorFlow's intra-/inter-op thread pools where the scenario asks (before the runtime starts).

    0 is TensorFlow's "let the system choose"; the values in force are recorded either way.
    """
    try:
        if cpu_threads.get("intra_op"):
            tf.config.threading.set_intra_op_parallelism_threads(int(cpu_threads["intra_op"]))
        if cpu_threads.get("inter_op"):
            tf.config.threading.set_inter_op_parallelism_threads(int(cpu_threads["inter_op"]))
    except RuntimeError:  # the runtime already started in this process (never in a fresh worker): keep its pools
        pass
    return {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op": tf.config.threading.get_inter_op_parallelism_threads()}


class TensorFlowDevice(DeviceDefaults):
    """A resolved device as TensorFlow sees it (harness.seam.adapter.Device)."""

    #: the tf.distribute strategy of a data-parallel replica's device; None: a plain run
    strategy = None
    #: TensorFlow's names of the devices this process trains replicas on, where it holds several
    tf_devices: tuple[str, ...] | list[str] = ()

    def __init__(self, name: str, cpu_threads: dict):
        self.threads = set_threads(cpu_threads)
        enable_memory_growth()
        self.placement = resolve(name)
        self.neutral = self.placement.neutral
        self._peak = AllocatorPeak(self.placement)

    def check_build(self) -> list[str]:
        """On a GPU: whether this TensorFlow build has kernels it can load (its build info's
        cuda_compute_capabilities against the GPU's; Unsupported where none, a warning where it compiles PTX)."""
        if not self.placement.is_gpu:
            return []
        archs, capability = build_archs_and_capability(self.placement)
        return check_cuda_build(f"TensorFlow {tf.__version__}", archs, capability,
                                f"{self.neutral} ({device_name(self.placement)})")

    def identity(self) -> dict:
        """The device's identity fields, the thread pools in force among its `env`."""
        fields = identity(self.placement)
        fields["env"]["threads"] = self.threads
        return fields

    def clock(self):
        """A wall clock read after every device is synchronized."""
        return clock()

    def reset_peak(self) -> None:
        """Start the allocator's peak over."""
        self._peak.reset()

    def peak_allocated_bytes(self) -> int | None:
        """The allocator's peak since reset_peak (AllocatorPeak.peak_bytes)."""
        return self._peak.peak_bytes()

    def scope(self):
        """Ops created inside run on this device (tf.device), so a step needs no placement of its own."""
        return tf.device(self.placement.tf_name)

    def profile(self, step, steps: int, trace_dir: str | None):
        """TensorFlow's profiler around `steps` more steps (backends.tensorflow.profile): this GPU's stream
        kernels, or TensorFlow's and XLA's ops on the CPU."""
        index = int(self.placement.tf_name.rsplit(":", 1)[1]) if self.placement.is_gpu else None
        return profile.capture(step, index, steps, trace_dir)


def environment() -> dict:
    """The framework side of the record's `env`: versions TF was built with, Keras, relevant variables."""
    try:
        build = dict(tf.sysconfig.get_build_info())
    except Exception:  # noqa: BLE001 - build info is informative only
        build = {}
    gpus = tf.config.list_physical_devices("GPU")
    env = {
        "tensorflow": tf.__version__,
        "keras": compat.keras_version(),
        "keras_remat_scope": compat.has_remat_scope(),  # present from Keras 3.9; recompute uses tf.recompute_grad
        "tf_cuda_build": build.get("is_cuda_build"),
        "tf_cuda_version": build.get("cuda_version"),
        "tf_cudnn_version": build.get("cudnn_version"),
        "xla_flags_set": bool(os.environ.get("XLA_FLAGS") or os.environ.get("TF_XLA_FLAGS")),
        # oneDNN is on by default on x86 Linux since TF 2.9; TF_ENABLE_ONEDNN_OPTS=0 turns it off
        "onednn_opts": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default"),
        "gpus_visible": len(gpus),
        # the GPUs this run's TensorFlow used: a one-GPU run hides the others (resolve)
        "gpus_logical": len(tf.config.get_visible_devices("GPU")),
        # False on a GPU means TF grabbed (nearly) all its memory and the allocator peak is still right,
        # but NVML's used memory is not; TF_FORCE_GPU_ALLOW_GROWTH=true (below) has the same effect
        "gpu_memory_growth": [bool(tf.config.experimental.get_memory_growth(gpu)) for gpu in gpus],
    }
    env["variables"] = {name: os.environ[name] for name in ENV_VARIABLES if name in os.environ}
    return env
