"""The seam between the core and a backend: what each hands the other, typed.

A backend supplies two things per run, and nothing about the measurement itself:

- a `Device` (from `Backend.open_device`): where the run is, how to wait for it, its memory peak
  (`DeviceDefaults` gives the optional parts their defaults);
- a `Prepared` step (from the workload module's `prepare`): one call of `step()` is one unit of
  the workload's work (one training step, one matrix product), plus the APIs it used and the
  evidence (`checks`) read after the timed region.

The core hands `prepare` a `RunInputs`: the seed, the options, whether it is a capacity probe, the
replica of a data-parallel run, and a `RunContext` for warnings and telemetry.

The core (harness.worker.execute) times `step` with harness.timing.loop, computes rates, FLOP/s, status and
the record. See docs/architecture.md for the data flow and how to add a workload or a backend.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Protocol

from harness.errors import Unsupported
from harness.machine.telemetry import Sampler, sampler_for
from harness.seam.distributed import Replica
from harness.timing.loop import Clock, Timing
from harness.timing.profile import Capture


@dataclass
class RunContext:
    """What the core hands a backend besides the spec: a place for warnings, and the telemetry sampler."""

    #: Filled by the backend: warnings that belong in the record (shown in every table).
    warnings: list[str] = field(default_factory=list)
    #: The telemetry sampler handed out by telemetry_for (the worker reads it afterwards).
    telemetry: Sampler | None = None

    def telemetry_for(self, device: str) -> Sampler:
        """An NVML sampler for a neutral device (`cuda:N`), or a no-op one for the CPU / without NVML."""
        self.telemetry = sampler_for(device)
        return self.telemetry


class Device(Protocol):
    """A resolved device as one framework sees it."""

    #: The neutral name the run used (`cpu`, `cuda:0`), never `auto`.
    neutral: str

    def identity(self) -> dict:
        """`device`, `device_name`, `framework_version` and the framework side of `env`."""

    def clock(self) -> tuple[Clock, str]:
        """The clock that waits for this device before each read, and the API it waits with."""

    def scope(self) -> ContextManager:
        """A context the core enters around prepare and the timed loop (TensorFlow: tf.device)."""

    def reset_peak(self) -> None:
        """Start the allocator's peak over (before the first timed step)."""

    def peak_allocated_bytes(self) -> int | None:
        """The framework allocator's peak since reset_peak; None where the framework cannot say."""

    def peak_reserved_bytes(self) -> int | None:
        """The memory the framework's allocator held at its peak since reset_peak, in use or not (fragmentation
        shows as reserved beyond allocated); None where the framework cannot say."""

    def after_timing(self, step: Callable[[], Any], timing: Timing, params, ctx: RunContext) -> dict:
        """Extra `timing` fields measured after the timed region (e.g. a launch-bound probe); may be {}."""

    def profile(self, step: Callable[[], Any], steps: int, trace_dir: str | None) -> Capture:
        """Run `step` `steps` more times (plus one unprofiled first) under the framework's own profiler, after
        the timed blocks; the kernels (GPU) or top-level ops (CPU) it saw, the steps' window on the same
        clock, and the backend's table of classes (harness.timing.profile). Raises where it cannot."""

    def replica_peaks(self) -> list[dict] | None:
        """Each replica's device and allocator peak where this process holds several replicas of a
        data-parallel run (`replica`, `device`, `peak_allocated_bytes`); None where it holds one or none."""

    def check_build(self) -> list[str]:
        """Whether the framework's own build can run on this device, asked first thing after its import, before any
        kernel runs: Unsupported where it cannot (a CUDA build with no kernel the GPU can load), else warnings
        (one that must compile its kernels first); harness.seam.cudabuild compares CUDA builds."""


class DeviceDefaults:
    """The defaults of the Device methods a framework may have nothing for; a device inherits them and
    overrides what its framework has (it always implements `neutral`, `identity` and `clock`)."""

    def scope(self) -> ContextManager:
        """No context: the framework places work by its tensors' device."""
        return contextlib.nullcontext()

    def reset_peak(self) -> None:
        """No allocator peak to start over."""

    def peak_allocated_bytes(self) -> int | None:
        """None: the framework's allocator keeps no peak (the record has the host's RSS)."""
        return None

    def peak_reserved_bytes(self) -> int | None:
        """None: the framework's allocator says nothing of what it holds beyond what is in use."""
        return None

    def after_timing(self, step: Callable[[], Any], timing: Timing, params, ctx: RunContext) -> dict:
        """No figures measured after the timed region."""
        return {}

    def profile(self, step: Callable[[], Any], steps: int, trace_dir: str | None) -> Capture:
        """No profiler: Unsupported, which the record's `profile` reports as its reason."""
        raise Unsupported("this backend has no profiler hook (Device.profile)")

    def replica_peaks(self) -> list[dict] | None:
        """None: this process holds one replica at most."""
        return None

    def check_build(self) -> list[str]:
        """Nothing to check: the framework's build runs wherever it opened the device."""
        return []


@dataclass
class RunInputs:
    """What `prepare` gets besides params and device: the seed, the backend's validated options, the context."""

    seed: int
    options: dict
    ctx: RunContext
    #: a capacity probe: build for the step's memory, skip autotuning sweeps (cuDNN benchmark mode)
    probe: bool = False
    #: which replica of a data-parallel run this process is; None: a plain run
    replica: Replica | None = None


@dataclass
class Prepared:
    """A built step, ready to be timed by the core.

    `checks` and `timing_fields` are called after the timed region (so reading a loss as a number
    never lands inside it); `close` frees what the step holds before the process reports.
    """

    step: Callable[[], Any]
    api: dict[str, str]
    checks: Callable[[], dict] = dict
    timing_fields: Callable[[], dict] = dict
    close: Callable[[], None] = lambda: None
    #: a data-parallel replica's settings for the record's `distributed` (the gradient all-reduce's)
    distributed: dict | None = None
    #: training steps one call of `step` runs (Keras `fit` with steps_per_epoch=k: k); the core times the
    #: calls and counts k steps per call in every rate and per-step time (timing.steps_per_call)
    steps_per_call: int = 1
