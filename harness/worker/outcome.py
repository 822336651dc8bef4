"""What one worker process reports: the fields of the record it measured, typed, until its result file is written.

The worker fills a `WorkerResult` as the run goes (harness.worker.execute); a run that fails keeps what it
had measured by then. `to_dict()` is the result file's JSON object, which the runner merges into the run's
record: only the fields the worker reached are in it, so a field it never got to keeps the runner's value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.results.parts import BlockTiming, Checks, Distributed, Profile, Telemetry


@dataclass
class Figures:
    """The record's figures of a timed region, read after it: statistics, rates, checks, energy, the verdict's input."""

    median: float | None
    iqr: float | None
    ci_low: float | None
    ci_high: float | None
    cv: float | None
    #: the APIs the step used, with the clock's synchronization (`sync`)
    api: dict[str, str]
    #: the headline rate of each timed block
    samples: list[float]
    step_time_s: float
    first_step_s: float
    #: the backend's evidence (Prepared.checks), typed
    checks: Checks
    #: the record's `timing` entry (Timing.fields, with the backend's extra figures)
    timing: BlockTiming
    telemetry: Telemetry
    energy_j: float | None = None
    avg_power_w: float | None = None
    device_used_bytes: int | None = None
    #: TFLOP/s; None where the workload counts no FLOPs (left out of the result)
    tflops: float | None = None
    #: whether the device has a datasheet peak (a GPU): pct_of_peak is written for it only, null where unknown
    has_datasheet: bool = False
    pct_of_peak: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The figures as record fields, in the record's order."""
        row: dict[str, Any] = dict(median=self.median, iqr=self.iqr, ci_low=self.ci_low, ci_high=self.ci_high,
                                   cv=self.cv, api=self.api, samples=self.samples, step_time_s=self.step_time_s,
                                   first_step_s=self.first_step_s, checks=self.checks.to_dict(),
                                   timing=self.timing.to_dict())
        if self.tflops is not None:
            row["tflops"] = self.tflops
        if self.has_datasheet:
            row["pct_of_peak"] = self.pct_of_peak
        row.update(telemetry=self.telemetry.to_dict(), energy_j=self.energy_j, avg_power_w=self.avg_power_w,
                   device_used_bytes=self.device_used_bytes)
        return row


@dataclass
class Measured:
    """What a timed region that ended left: the allocator's peak, read at once, then its figures (None where the
    run failed between the two, e.g. in the workload's checks)."""

    peak_allocated_bytes: int | None
    figures: Figures | None = None


@dataclass
class WorkerResult:
    """One worker's part of a run's record. None (or an empty identity) is a field the run never reached."""

    started_at: str
    #: seconds per phase of the worker (harness.worker.execute.measure_run)
    phases_s: dict[str, float] | None = None
    #: a data-parallel replica's layout and settings, which the runner merges into the record's `distributed`
    distributed_replica: Distributed | None = None
    #: the device's identity (`device`, `device_name`, `framework_version`), once the device is open
    identity: dict[str, Any] = field(default_factory=dict)
    #: the framework's side of `env`: the device's, again once prepare has put its settings in force
    framework_env: dict[str, Any] | None = None
    measured: Measured | None = None
    #: the profile breakdown (measure.profile), or {"error": why}; None where the run was not profiled
    profile: Profile | None = None
    status: str | None = None
    error: str | None = None
    #: why a failure counts as out-of-memory, where the error was not a memory error itself
    oom_evidence: str | None = None
    traceback: str | None = None
    warnings: list[str] = field(default_factory=list)
    host_peak_rss_bytes: int | None = None
    #: how the run kept the host to itself while timed (harness.worker.hostlock.timing_lock); into `env.isolation`
    isolation: dict[str, Any] | None = None
    #: the whole `env`: the machine's, with `framework_env` under `framework`
    env: dict[str, Any] | None = None
    duration_s: float | None = None

    def measured_fields(self) -> dict[str, Any]:
        """The fields a measurement reached, flat, with `env` the framework's (what a backend's tests look at)."""
        row: dict[str, Any] = {}
        if self.phases_s is not None:
            row["phases_s"] = self.phases_s
        if self.distributed_replica is not None:
            row["distributed_replica"] = self.distributed_replica.to_dict()
        row.update(self.identity)
        if self.framework_env is not None:
            row["env"] = self.framework_env
        if self.measured is not None:
            row["peak_allocated_bytes"] = self.measured.peak_allocated_bytes
            if self.measured.figures is not None:
                row.update(self.measured.figures.to_dict())
        if self.profile is not None:
            row["profile"] = self.profile.to_dict()
        if self.status is not None:
            row["status"] = self.status
        if self.error is not None:
            row["error"] = self.error
        return row

    def to_dict(self) -> dict[str, Any]:
        """The result file's JSON object: the fields reached, in the record's order."""
        row: dict[str, Any] = {"started_at": self.started_at, **self.measured_fields()}
        row.pop("env", None)  # the whole env, below, holds the framework's
        if self.oom_evidence is not None:
            row["oom_evidence"] = self.oom_evidence
        if self.traceback is not None:
            row["traceback"] = self.traceback
        row.update(warnings=self.warnings, host_peak_rss_bytes=self.host_peak_rss_bytes)
        if self.env is not None:
            row["env"] = self.env
        if self.duration_s is not None:
            row["duration_s"] = self.duration_s
        return row
