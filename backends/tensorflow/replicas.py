"""The devices of a data-parallel run: one worker's replica under MultiWorkerMirroredStrategy, or every replica
in one process under MirroredStrategy (`tensorflow.strategy: mirrored`). docs/distributed.md."""

from __future__ import annotations

import tensorflow as tf

from backends.tensorflow import compat
from backends.tensorflow.device import (
    AllocatorPeak,
    Placement,
    TensorFlowDevice,
    clock,
    enable_memory_growth,
    set_threads,
)
from harness.errors import Unsupported
from harness.seam.distributed import BarrierClock
from harness.timing.loop import WallClock

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
            except tf.errors.OpError:
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
