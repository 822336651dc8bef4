"""Devices as torch sees them: resolving neutral names, naming hardware, clocks, memory, environment."""

from __future__ import annotations

import datetime
import importlib.metadata as md
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from backends.torch import compat, profile
from harness.errors import Unsupported
from harness.machine.devices import gpu_index, normalize_device
from harness.machine.env import cpu_model
from harness.seam.adapter import DeviceDefaults
from harness.seam.cudabuild import check_cuda_build
from harness.seam.distributed import BarrierClock
from harness.timing.loop import BlockTime, WallClock


def resolve_device(name: str) -> str:
    """The neutral device a run uses: `auto` becomes the first CUDA GPU, else `cpu`.

    A `cuda:N` that torch does not see is Unsupported (not a crash), naming how many GPUs it sees.
    """
    neutral = normalize_device(name)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if neutral == "auto":
        return "cuda:0" if count else "cpu"
    if neutral == "cpu":
        return "cpu"
    index = gpu_index(neutral)
    if index is None or index >= count:
        built = "" if torch.version.cuda else f"; this torch {torch.__version__} was built without CUDA"
        raise Unsupported(f"device {neutral} is not present: torch sees {count} GPU{'' if count == 1 else 's'}{built}")
    return neutral


def torch_device(neutral: str):
    """The torch.device for a resolved neutral device; on a GPU it also becomes the current device."""
    if neutral == "cpu":
        return torch.device("cpu")
    index = gpu_index(neutral)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def device_name(device) -> str:
    """What the device is: `NVIDIA H200`, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model() or "cpu"


def compute_capability(device) -> tuple[int, int] | None:
    """(major, minor) of a CUDA device; None for the CPU."""
    if device.type != "cuda":
        return None
    return tuple(torch.cuda.get_device_capability(device))  # type: ignore[return-value]


class CudaClock:
    """CUDA events around a region plus a wall clock read after a device synchronization.

    Implements harness.timing.loop.Clock: the wall time is what the headline uses; the event time is
    the device's view of the same region (they differ by launch gaps at the edges).
    """

    def __init__(self, device):
        self._device = device

    def sync(self) -> None:
        """Wait for all work queued on the device."""
        torch.cuda.synchronize(self._device)

    def start(self) -> tuple[Any, float]:
        """Synchronize, record the start event, read the wall clock."""
        torch.cuda.synchronize(self._device)
        begin = torch.cuda.Event(enable_timing=True)
        begin.record()
        return begin, time.perf_counter()

    def stop(self, token: tuple[Any, float]) -> BlockTime:
        """Record the end event, synchronize, read the wall clock; both times of the region."""
        begin, t0 = token
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        torch.cuda.synchronize(self._device)
        wall = time.perf_counter() - t0
        return BlockTime(wall_s=wall, device_s=begin.elapsed_time(end) / 1000.0)


def clock_for(device):
    """The Clock for a torch device: CUDA events on a GPU, perf_counter on the CPU."""
    return CudaClock(device) if device.type == "cuda" else WallClock()


def reset_peak_memory(device) -> None:
    """Start the allocator's peak over again (CUDA); the CPU has no allocator peak in torch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def peak_allocated_bytes(device) -> int | None:
    """The CUDA caching allocator's peak since reset_peak_memory; None on the CPU (the worker reads RSS)."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_allocated(device))


def peak_reserved_bytes(device) -> int | None:
    """The CUDA caching allocator's reserved peak since reset_peak_memory; None on the CPU."""
    if device.type != "cuda":
        return None
    return int(torch.cuda.max_memory_reserved(device))


def identity(neutral: str, device) -> dict:
    """The record fields that say where and with what a run ran, the same for every workload."""
    return {"device": neutral, "device_name": device_name(device), "framework_version": torch.__version__,
            "env": framework_env(device)}


def framework_env(device) -> dict:
    """torch-side environment worth keeping with a result: build versions and the settings in force."""
    cudnn = torch.backends.cudnn
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda_version": torch.version.cuda,
        "cudnn_version": cudnn.version() if cudnn.is_available() else None,
        "cudnn_benchmark": bool(cudnn.benchmark),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        # cuBLAS may reduce fp16/bf16 products in reduced precision (torch's default: allowed)
        "cuda_matmul_fp16_reduced_precision_reduction": getattr(
            torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", None
        ),
        "cuda_matmul_bf16_reduced_precision_reduction": getattr(
            torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", None
        ),
        "num_threads": torch.get_num_threads(),
        "cpu_capability": compat.cpu_capability(),
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
    }
    try:
        env["torchvision"] = md.version("torchvision")
    except md.PackageNotFoundError:
        env["torchvision"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu_compute_capability"] = f"{props.major}.{props.minor}"
        env["gpu_memory_bytes"] = int(props.total_memory)
        env["gpu_multiprocessors"] = int(props.multi_processor_count)
        env["gpu_count"] = torch.cuda.device_count()
    return env


def set_threads(cpu_threads: dict) -> dict:
    """Set torch's CPU thread pools where the scenario asks (None: torch's default); the values in force."""
    if cpu_threads.get("intra_op"):
        torch.set_num_threads(int(cpu_threads["intra_op"]))
    if cpu_threads.get("inter_op"):
        try:
            torch.set_num_interop_threads(int(cpu_threads["inter_op"]))
        except RuntimeError:  # only before the first parallel work of the process; a worker is fresh
            pass
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


class TorchDevice(DeviceDefaults):
    """A resolved device as torch sees it (harness.seam.adapter.Device); its scope is none, as torch places
    work by its tensors' device."""

    def __init__(self, name: str, cpu_threads: dict):
        self.threads = set_threads(cpu_threads)
        self.neutral = resolve_device(name)
        self.torch = torch_device(self.neutral)

    @property
    def is_cuda(self) -> bool:
        """Whether the device is a CUDA GPU."""
        return self.torch.type == "cuda"

    def identity(self) -> dict:
        """The device's identity fields, the thread pools in force among its `env`."""
        fields = identity(self.neutral, self.torch)
        fields["env"]["threads"] = self.threads
        return fields

    def check_build(self) -> list[str]:
        """On a GPU: whether this torch build has kernels it can load (torch.cuda.get_arch_list against the GPU's
        compute capability; Unsupported where it has none, a warning where it compiles them from PTX)."""
        if not self.is_cuda:
            return []
        return check_cuda_build(f"torch {torch.__version__}", torch.cuda.get_arch_list(), compute_capability(self.torch),
                                f"{self.neutral} ({device_name(self.torch)})")

    def clock(self):
        """CUDA events and a synchronized wall clock on a GPU; perf_counter on the CPU."""
        return clock_for(self.torch), ("CUDA events + torch.cuda.synchronize()" if self.is_cuda else "time.perf_counter")

    def reset_peak(self) -> None:
        """Start the CUDA allocator's peak over (the CPU has none)."""
        reset_peak_memory(self.torch)

    def peak_allocated_bytes(self) -> int | None:
        """The CUDA allocator's peak since reset_peak; None on the CPU."""
        return peak_allocated_bytes(self.torch)

    def peak_reserved_bytes(self) -> int | None:
        """The CUDA allocator's reserved peak since reset_peak; None on the CPU."""
        return peak_reserved_bytes(self.torch)

    def profile(self, step: Callable[[], Any], steps: int, trace_dir: str | None):
        """torch.profiler around `steps` more steps (backends.torch.profile): CUDA kernels on a GPU, the
        outermost aten ops on the CPU. Whether the GPU waits on the host (launch-bound) is read from it."""
        return profile.capture(step, self.torch, steps, trace_dir)


class TorchReplicaDevice(TorchDevice):
    """One replica of a data-parallel run: its own device, and torch.distributed's process group joined."""

    def __init__(self, name: str, cpu_threads: dict, replica):
        if name == "auto":  # the first GPU if there is one: replica i then takes the i-th from it
            name = f"cuda:{replica.local_rank}" if torch.cuda.is_available() and torch.cuda.device_count() else "cpu"
        super().__init__(name, cpu_threads)
        self.replica = replica
        self.dist_backend = "nccl" if self.is_cuda else "gloo"
        # env:// from torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE); the runner's timeout is the real bound
        dist.init_process_group(self.dist_backend, timeout=datetime.timedelta(minutes=30))

    def barrier(self) -> None:
        """torch.distributed's barrier of every replica (on this replica's GPU under NCCL)."""
        if self.is_cuda:
            dist.barrier(device_ids=[self.torch.index])
        else:
            dist.barrier()

    def clock(self):
        """This device's clock, each read after a barrier of every replica (BarrierClock)."""
        inner, api = super().clock()
        return BarrierClock(inner, self.barrier), f"torch.distributed.barrier() ({self.dist_backend}), then {api}"

    def identity(self) -> dict:
        """The device's identity fields, this replica's place in the process group in `env.distributed`."""
        fields = super().identity()
        fields["env"]["distributed"] = {"backend": self.dist_backend, "rank": self.replica.rank,
                                        "world_size": self.replica.world_size}
        return fields
