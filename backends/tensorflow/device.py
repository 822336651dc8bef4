"""Devices as TensorFlow sees them: memory growth, neutral names, the clock, allocator peaks, TF32, env.

The step a device runs (tf.function, XLA, strategy.run) is built in backends.tensorflow.step."""

from __future__ import annotations

import os
from dataclasses import dataclass

from backends.tensorflow import compat, profile
from harness.errors import Unsupported
from harness.machine.env import cpu_model
from harness.seam.adapter import DeviceDefaults
from harness.seam.cudabuild import check_cuda_build
from harness.seam.distributed import BarrierClock
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
    tf = compat.tf_module()
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
    tf = compat.tf_module()
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
        tf = compat.tf_module()
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
    tf = compat.tf_module()
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
        raise Unsupported("TF32 is a tensor-core format of NVIDIA Ampere and newer GPUs; the CPU has none")
    tf = compat.tf_module()
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
            "framework_version": compat.tf_module().__version__, "env": environment()}


def set_threads(cpu_threads: dict) -> dict:
    """Set TensorFlow's intra-/inter-op thread pools where the scenario asks (before the runtime starts).

    0 is TensorFlow's "let the system choose"; the values in force are recorded either way.
    """
    tf = compat.tf_module()
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
        return check_cuda_build(f"TensorFlow {compat.tf_module().__version__}", archs, capability,
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
        return compat.tf_module().device(self.placement.tf_name)

    def profile(self, step, steps: int, trace_dir: str | None):
        """TensorFlow's profiler around `steps` more steps (backends.tensorflow.profile): this GPU's stream
        kernels, or TensorFlow's and XLA's ops on the CPU."""
        index = int(self.placement.tf_name.rsplit(":", 1)[1]) if self.placement.is_gpu else None
        return profile.capture(step, index, steps, trace_dir)


#: bytes_per_pack of the gradient all-reduce: torch DDP's 25 MiB bucket, so both sides pack alike
BYTES_PER_PACK = 25 * 1024 * 1024

#: What every tf.distribute strategy harness uses does with the gradients (distributed.allreduce)
ALLREDUCE_SEMANTICS = {
    "overlap": "none: the gradients are all-reduced after the whole backward, in the optimizer's apply",
    "gradients": "summed over the replicas of a loss divided by the global batch: the mean over it",
    "batchnorm": "per replica (Keras BatchNormalization, not SyncBatchNormalization)",
}


class TensorFlowReplicaDevice(TensorFlowDevice):
    """One worker of a data-parallel run: its one device visible, and MultiWorkerMirroredStrategy made
    before any op runs (TensorFlow requires it at the start of the program)."""

    def __init__(self, name: str, cpu_threads: dict, replica):
        tf = compat.tf_module()
        self.threads = set_threads(cpu_threads)
        enable_memory_growth()
        gpus = tf.config.list_physical_devices("GPU")
        if name == "auto":
            name = f"cuda:{replica.local_rank}" if gpus else "cpu"
        if name.startswith("cuda:"):
            index = int(name.split(":", 1)[1])
            if index >= len(gpus):
                raise Unsupported(f"replica rank {replica.rank} needs device {name}, but TensorFlow sees "
                                  f"{len(gpus)} GPU(s)")
            # this worker's GPU only: MultiWorkerMirroredStrategy would otherwise take every GPU it sees
            tf.config.set_visible_devices([gpus[index]], "GPU")
            self.placement = Placement(name, "/GPU:0")
            implementation = tf.distribute.experimental.CommunicationImplementation.NCCL
        else:
            tf.config.set_visible_devices([], "GPU")
            self.placement = Placement("cpu", "/CPU:0")
            implementation = tf.distribute.experimental.CommunicationImplementation.RING
        self.neutral = self.placement.neutral
        self._peak = AllocatorPeak(self.placement)
        self.replica = replica
        options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=BYTES_PER_PACK,
                                                                  implementation=implementation)
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        if self.strategy.num_replicas_in_sync != replica.world_size:
            raise Unsupported(f"MultiWorkerMirroredStrategy has {self.strategy.num_replicas_in_sync} replicas in sync, "
                              f"expected {replica.world_size} (one device per worker)")
        self.allreduce = {"strategy": "tf.distribute.MultiWorkerMirroredStrategy",
                          "implementation": implementation.name, "bytes_per_pack": BYTES_PER_PACK, **ALLREDUCE_SEMANTICS}
        self._barrier = None

    def barrier(self) -> None:
        """A one-number all-reduce over every worker: returns once all of them reached it."""
        tf = compat.tf_module()
        if self._barrier is None:
            strategy = self.strategy

            def one():
                return tf.distribute.get_replica_context().all_reduce("sum", tf.constant(1.0))

            self._barrier = tf.function(lambda: strategy.run(one), jit_compile=False)
        for value in self.strategy.experimental_local_results(self._barrier()):
            value.numpy()

    def clock(self):
        """The device sync where the context allows it, then a barrier of every worker (BarrierClock)."""
        sync, api = compat.device_sync()
        state = {"sync": sync}

        def local_sync():
            # sync_devices refuses a multi-worker eager context on some versions ("Haven't set up remote eager
            # worker"); the barrier after it reads an all-reduce back to the host, which waits for the device
            if state["sync"] is None:
                return
            try:
                state["sync"]()
            except compat.tf_module().errors.OpError:
                state["sync"] = None

        return BarrierClock(WallClock(local_sync), self.barrier), (
            f"{api} where this context allows it, then an all-reduce barrier of every worker read back to the host")

    def scope(self):
        """Variables made inside are mirrored on every worker (strategy.scope())."""
        return self.strategy.scope()

    def identity(self) -> dict:
        """The device's identity fields, this worker's place among the replicas in `env.distributed`."""
        fields = super().identity()
        fields["env"]["distributed"] = {"strategy": "MultiWorkerMirroredStrategy", "rank": self.replica.rank,
                                        "world_size": self.replica.world_size}
        return fields


class TensorFlowMirroredDevice(TensorFlowDevice):
    """Every replica of a data-parallel run in this one process (`tensorflow.strategy: mirrored`): replica i
    on cuda:K+i (on the CPU, logical CPU device i), MirroredStrategy over them, made before any op runs.

    The gradients are all-reduced inside the process: tf.distribute.NcclAllReduce on GPUs (TensorFlow's
    default packing, num_packs=1), ReductionToOneDevice on the CPU, which has no NCCL. No barrier is
    needed: the clock's device sync waits for every GPU of the process.
    """

    def __init__(self, name: str, cpu_threads: dict, replica):
        tf = compat.tf_module()
        self.threads = set_threads(cpu_threads)
        enable_memory_growth()
        count = replica.world_size
        gpus = tf.config.list_physical_devices("GPU")
        if name == "auto":
            name = "cuda:0" if gpus else "cpu"
        if name.startswith("cuda:"):
            first = int(name.split(":", 1)[1])
            if first + count > len(gpus):
                raise Unsupported(f"tensorflow.strategy=mirrored with {count} replicas from {name} needs GPUs "
                                  f"{first}..{first + count - 1}, but TensorFlow sees {len(gpus)} GPU(s)")
            tf.config.set_visible_devices(gpus[first:first + count], "GPU")
            devices = [f"/GPU:{i}" for i in range(count)]
            self.replica_devices = [f"cuda:{first + i}" for i in range(count)]
            cross = tf.distribute.NcclAllReduce(num_packs=1)
            implementation = {"implementation": "tf.distribute.NcclAllReduce", "num_packs": 1}
        else:
            tf.config.set_visible_devices([], "GPU")
            cpus = tf.config.list_physical_devices("CPU")
            tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * count)
            devices = [f"/CPU:{i}" for i in range(count)]
            self.replica_devices = ["cpu"] * count
            cross = tf.distribute.ReductionToOneDevice(reduce_to_device="/CPU:0")
            implementation = {"implementation": "tf.distribute.ReductionToOneDevice (the CPU has no NCCL)"}
        self.placement = Placement(name, devices[0])
        self.neutral = self.placement.neutral
        self._peak = AllocatorPeak(self.placement)
        self._peaks = [AllocatorPeak(Placement(n, d)) for n, d in zip(self.replica_devices, devices)]
        self.replica = replica
        self.tf_devices = devices
        self.strategy = tf.distribute.MirroredStrategy(devices=devices, cross_device_ops=cross)
        if self.strategy.num_replicas_in_sync != count:
            raise Unsupported(f"MirroredStrategy has {self.strategy.num_replicas_in_sync} replicas in sync, "
                              f"expected {count} (one device each)")
        self.allreduce = {"strategy": "tf.distribute.MirroredStrategy", **implementation, **ALLREDUCE_SEMANTICS}

    def clock(self):
        """A wall clock read after every device of the process is synchronized."""
        wall, api = clock()
        return wall, f"{api} (every device of the process)"

    def reset_peak(self) -> None:
        """Start every replica's allocator peak over."""
        for peak in self._peaks:
            peak.reset()

    def replica_peaks(self) -> list[dict]:
        """Each replica's device and its allocator peak (peak_allocated_bytes is replica 0's)."""
        return [{"replica": i, "device": name, "peak_allocated_bytes": peak.peak_bytes()}
                for i, (name, peak) in enumerate(zip(self.replica_devices, self._peaks))]

    def scope(self):
        """Variables made inside are mirrored on every replica's device (strategy.scope())."""
        return self.strategy.scope()

    def identity(self) -> dict:
        """The device's identity fields, every replica's device in `env.distributed`."""
        fields = super().identity()
        fields["env"]["distributed"] = {"strategy": "MirroredStrategy", "rank": 0, "world_size": self.replica.world_size,
                                        "devices": list(self.replica_devices)}
        return fields


def environment() -> dict:
    """The framework side of the record's `env`: versions TF was built with, Keras, relevant variables."""
    tf = compat.tf_module()
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
