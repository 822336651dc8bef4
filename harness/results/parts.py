"""The typed parts of a record: how its blocks were timed, NVML's telemetry, the workload's checks, the profile
breakdown, a data-parallel run's layout and the worker's phases (its environment is harness.machine.env's
`Environment`, which the machine checks read too).

Each is a `harness.fields.RecordPart`: immutable, validated on construction, the keys harness reads declared and
typed, every other key (a backend's own figure, a newer version's) kept, and written back as it came.
"""

from __future__ import annotations

from typing import Any

from harness.fields import ListOf, Number, RecordPart

#: Seconds per block, per rank ...: numbers, null where one was not measured.
Series = ListOf(Number | None)


class BlockTiming(RecordPart):
    """The record's `timing`: how the timed blocks ran (harness.timing.loop.Timing.fields), with the backend's and
    the device's own timing figures beside them (`Prepared.timing_fields`, `Device.after_timing`)."""

    steps_per_block: int | None = None
    #: why the timed loop ended: repeats, min_time, target_ci, max_repeats
    stop_reason: str | None = None
    block_wall_s: Series | None = None
    block_device_s: Series | None = None
    #: how `steps: auto` chose the steps per block
    steps_chosen: dict[str, Any] | None = None
    steps_per_call: int | None = None
    warmup_raised_to: int | None = None
    warmup_s: Number | None = None
    #: the next runs' workers paused while this run was timed
    paused_workers: int | None = None

    def blocks_s(self) -> float:
        """Seconds of every timed block together (0 where none was timed)."""
        return float(sum(s for s in self.block_wall_s or () if s is not None))


class Telemetry(RecordPart):
    """The record's `telemetry`: NVML's figures of the timed region (harness.machine.telemetry), {} without NVML."""

    note: str | None = None
    avg_power_w: Number | None = None
    energy_j: Number | None = None
    sm_clock_min_mhz: Number | None = None
    sm_clock_mean_mhz: Number | None = None
    sm_clock_max_mhz: Number | None = None
    temperature_max_c: Number | None = None
    device_used_bytes: int | None = None
    telemetry_samples: int | None = None
    timed_seconds: Number | None = None
    #: the headline's work per joule (images/J, TFLOP/J)
    per_joule: Number | None = None


class Checks(RecordPart):
    """The record's `checks`: the evidence read after the timed region (the backend's `Prepared.checks`: a loss, a
    product's error, the inputs' fingerprint), or, for a capacity search's record, how it searched."""

    inputs_fingerprint: str | None = None
    loss_last: Number | None = None
    parameters_sum: Number | None = None
    # a capacity search's record (harness.session.capacity_answer)
    probes: ListOf(list) | None = None
    first_failing_batch_size: int | None = None
    failure: str | None = None
    failure_evidence: str | None = None
    #: what bounded the answer: memory, kernel, time, limit
    limited_by: str | None = None
    search: str | None = None
    kernel_bound_batch: int | None = None
    within_pct: Number | None = None
    predicted_limit: int | None = None
    reached_limit: bool | None = None
    search_s: Number | None = None
    probe_seconds: Series | None = None
    batch_past_2_31_elements: int | None = None
    #: the steps each probe of the search trained, its first included (the answer trained this many)
    steps_trained: int | None = None
    #: the framework allocator's reserved peak (memory held, used or not) over a run's steps: a run's own where its
    #: framework keeps one (torch's max_memory_reserved on a GPU), a capacity record's of its answer's probe (None
    #: where the framework keeps none)
    peak_reserved_bytes: int | None = None
    #: a capacity record limited by a kernel's bound: the device's memory its allocator had not reserved
    memory_free_bytes: int | None = None


class Profile(RecordPart):
    """The record's `profile`: where a step's time goes, by the framework's own profiler after the timed blocks
    (harness.timing.profile, docs/profile.md); {"error": why} where it failed; empty where not profiled."""

    error: str | None = None
    #: seconds per step in each class of kernel (harness.timing.profile.CLASSES)
    classes_s: dict[str, Number | None] | None = None
    #: seconds per step no kernel covered
    idle_s: Number | None = None
    activity: str | None = None
    host_peak_rss_before_bytes: int | None = None

    def ms_per_step(self, classes: tuple[str, ...]) -> dict[str, float] | None:
        """Milliseconds per step in each of `classes` and `idle`; None without a breakdown."""
        if self.classes_s is None or self.idle_s is None:
            return None
        return {**{c: 1e3 * float(self.classes_s.get(c) or 0.0) for c in classes}, "idle": 1e3 * float(self.idle_s)}


class RankOutcome(RecordPart):
    """One rank's line in a data-parallel record's `distributed.ranks`: how it ended, its device, memory and inputs."""

    rank: int
    status: str | None = None
    device: str | None = None
    peak_allocated_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    inputs_fingerprint: str | None = None
    loss_last: Number | None = None
    parameters_sum: Number | None = None
    error: str | None = None


class ScalingBaseline(RecordPart):
    """What a record's scaling efficiency was computed against: the 1-replica configuration's ok records."""

    run_key: str | None = None
    processes: int | None = None
    median: Number | None = None


class Distributed(RecordPart):
    """The record's `distributed`: a data-parallel run's layout and settings (docs/distributed.md); empty for a
    plain run."""

    launcher: str | None = None
    nnodes: int | None = None
    node_rank: int | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    global_batch: int | None = None
    #: how rank 0's clock times the replicas
    timing: str | None = None
    ranks: ListOf(RankOutcome) | None = None
    peaks_of: str | None = None
    failed_rank: int | None = None
    other_failures: ListOf(str) | None = None
    killed_after_exit: int | None = None
    scaling_baseline: ScalingBaseline | None = None


class PhaseSeconds(RecordPart):
    """The record's `phases_s`: where the run's wall time went, in seconds (harness.worker.execute.measure_run);
    empty where no worker ran."""

    open_device: Number | None = None
    prepare: Number | None = None
    #: the timed steps, the wait for the host's timing lock left out
    steps: Number | None = None
    #: waiting for the host's timing lock while another session timed a run (harness.worker.hostlock): in
    #: duration_s, not the run's own time (Result.run_s); only where the run waited
    lock_wait: Number | None = None
    after: Number | None = None
    #: the rest of duration_s: the worker's start, its imports, its exit
    process: Number | None = None
    #: the framework's import by a worker started ahead, before the run was handed to it (not in duration_s)
    imported_ahead: Number | None = None
