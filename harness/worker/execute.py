"""One run, inside the worker: the core's half of the backend seam.

The backend opens the device and prepares the step (harness.seam.adapter); everything else is written
once for every backend: the timed loop (harness.timing.loop), the figures (harness.worker.figures:
rates and TFLOP/s, % of peak, telemetry), the status (out-of-memory through the backend's hook, the
workload's verdict on its checks), here, and the record's fields (harness.worker.outcome).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import traceback
from dataclasses import dataclass
from typing import Any, Iterator

from harness.errors import Diverged, OutOfMemory, Unsupported, WrongResult, first_line
from harness.machine import env as env_mod
from harness.machine.env import FrameworkEnv, Isolation
from harness.machine.variables import variables
from harness.results.parts import Distributed, Profile
from harness.results.record import utc_now
from harness.seam.adapter import Device, RunInputs
from harness.seam.backend import Backend, RunContext, available_backends
from harness.seam.distributed import Replica, replica_device, threads_per_replica
from harness.seam.runspec import RunSpec
from harness.timing.loop import run_timed
from harness.timing.profile import profile_run, profiled_calls
from harness.timing.settings import AUTO, Measure
from harness.worker.figures import TimedRun, figures
from harness.worker.hostlock import session_of, timing_lock
from harness.worker.neighbours import paused
from harness.worker.outcome import Measured, WorkerResult
from harness.workloads import WORKLOADS
from harness.workloads.base import Params, Workload


def host_peak_rss_bytes() -> int | None:
    """This process's peak resident set size (VmHWM), in bytes."""
    try:
        with open("/proc/self/status", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource  # POSIX only: deferred so that the worker's module imports everywhere

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    except Exception:
        return None


def _error_text(exc: BaseException) -> str:
    """The error as a record keeps it: its head and its tail, where frameworks put the cause (TensorFlow
    ends a graph error with the failing kernel's message, after the Python stack)."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 2000 else text[:1000] + " ... " + text[-1000:]


def classify(exc: BaseException, backend: Backend | None) -> tuple[str, str | None]:
    """The status an exception means, and for `oom` the evidence that it was a memory failure."""
    if isinstance(exc, Unsupported):
        return "unsupported", None
    if isinstance(exc, (OutOfMemory, MemoryError)):
        return "oom", f"{type(exc).__name__}: {first_line(exc)}"
    if isinstance(exc, Diverged):
        return "diverged", None
    if isinstance(exc, WrongResult):
        return "failed", None
    try:
        evidence = backend.out_of_memory(exc) if backend is not None else None
    except Exception:  # noqa: BLE001 - a broken hook must not hide the original error
        evidence = None
    return ("oom", evidence) if evidence else ("failed", None)


def progress_writer():
    """Progress events as JSON lines appended to $HARNESS_PROGRESS_FILE (the runner reads them); None without it."""
    path = variables().progress_file
    if not path:
        return None

    def write(phase: str, **figures) -> None:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"phase": phase, "t": time.time(), **figures}) + "\n")
        except OSError:  # progress is a courtesy: never let it fail a run
            pass

    return write


class Phases:
    """Where a worker's wall time went: seconds per phase, written into `into` as each ends, so a run that
    fails keeps the phases it finished and the one it failed in."""

    def __init__(self, into: dict, first: str, since: float | None = None):
        self.into, self.name = into, first
        self.last = time.perf_counter() if since is None else since

    def next(self, name: str | None) -> None:
        """End the current phase and start `name` (None: end it only)."""
        now = time.perf_counter()
        if self.name is not None:
            self.into[self.name] = round(self.into.get(self.name, 0.0) + now - self.last, 3)
        self.name, self.last = name, now


@dataclass
class OpenRun:
    """A run whose device is open: the spec's parts validated, and where the run is."""

    workload: Workload
    params: Params
    options: dict[str, Any]
    measure: Measure
    device: Device
    #: which replica of a data-parallel run this process is; None for a plain run
    replica: Replica | None
    #: who this run is, for another session that waits for the host's timing lock
    who: dict[str, Any] | None = None
    #: a capacity probe: no telemetry, no launch probe, no autotuning
    probe: bool = False


def measure_run(backend: Backend, spec: RunSpec, ctx: RunContext, result: WorkerResult,
                since: float | None = None) -> None:
    """Open the device, prepare the step, time it and fill `result` with what was measured.

    Raises whatever the backend raises; the fields known by then (the device's identity) stay.
    `result.phases_s` gets the seconds of each phase: open_device (the framework's import and the
    device's set-up), prepare (the model, the inputs, the step), steps (the first step, warm-up and timed
    blocks), after (checks, the profile breakdown where asked, the timed region's read-backs).
    """
    if result.phases_s is None:
        result.phases_s = {}
    phases = Phases(result.phases_s, "open_device", since)
    try:
        run = open_run(backend, spec, ctx, result)
        phases.next("prepare")
        timed = time_run(backend, run, int(spec.seed or 0), ctx, result, phases)
        result.measured.figures = figures(run.workload, run.params, timed, run.device.neutral,
                                          result.identity.get("device_name"), FrameworkEnv.of(result.framework_env),
                                          ctx)
        if run.replica is not None:
            note_replica(run, timed, result)
        status, error = run.workload.verdict(timed.checks, run.params)
        result.status = status or "ok"
        if error:
            result.error = error
    finally:
        phases.next(None)


def open_run(backend: Backend, spec: RunSpec, ctx: RunContext, result: WorkerResult) -> OpenRun:
    """Validate the spec and open its device (a data-parallel replica's own, joined to its peers); note the
    device's identity in `result`."""
    workload = WORKLOADS[spec.workload]
    params = workload.validate(spec.params)
    options = backend.validate_options(spec.options or {})
    threads = spec.cpu_threads or {}
    measure = spec.measure
    replicas = workload.replicas(params)
    replica = Replica.from_env() if replicas > 1 else None
    if replica is None and replicas > 1:
        raise Unsupported(f"replicas={replicas} needs the data-parallel launch (harness.session.dataparallel); "
                          "this worker was started as a single process")
    if replica is None:
        device = backend.open_device(spec.device or "auto", threads)
    else:
        threads = threads_per_replica(threads, replica.local_world_size)
        device = backend.open_replica(replica_device(spec.device or "auto", replica.local_rank), threads, replica)
        measure = fixed_blocks(measure, ctx)
        result.distributed_replica = Distributed(
            world_size=replica.world_size, local_world_size=replica.local_world_size,
            timing="rank 0's clock; every timed block starts and ends at a barrier of all replicas, so it covers the "
                   "slowest")
    identity = dict(device.identity())
    result.framework_env = identity.pop("env", None)
    result.identity = identity
    ctx.warnings.extend(device.check_build())  # before any kernel: a build the GPU cannot load is `unsupported`
    who = {"session": spec.session_id, "run": f"{spec.backend} {spec.workload} on {spec.device or 'auto'}",
           **session_of(os.getppid())}  # the worker's parent: the session a waiter is told of
    return OpenRun(workload=workload, params=params, options=options, measure=measure, device=device, replica=replica,
                   who=who, probe=spec.probe)


def time_run(backend: Backend, run: OpenRun, seed: int, ctx: RunContext, result: WorkerResult,
             phases: Phases) -> TimedRun:
    """Prepare the step and time it; read the allocator's peak into `result` as the timed loop ends, then the
    workload's checks and the backend's extra timing figures."""
    reason = backend.unsupported_reason(run.workload.name, run.params.model_dump(), run.device.neutral, run.options)
    if reason:  # asked before the worker too, but then the device may have been `auto`
        raise Unsupported(reason)
    probe = run.probe
    inputs = RunInputs(seed=seed, options=run.options, ctx=ctx, probe=probe, replica=run.replica)
    device = run.device
    with device.scope():
        prepared = backend.prepare(run.workload.name, run.params, device, inputs)
        result.framework_env = device.identity()["env"]  # again: the settings prepare put in force (TF32, threads)
        phases.next("steps")
        try:
            # no other session times while this run is; the next runs' workers, importing ahead, are still
            with host_isolation(run, result), paused() as neighbours:
                timing, work, sync_api, checks, extra = _timed_steps(prepared, run, probe, ctx, result, phases)
            _wait_apart(result)
            if neighbours:
                extra["paused_workers"] = len(neighbours)
        finally:
            prepared.close()
    return TimedRun(timing=timing, work_per_step=work, api={**prepared.api, "sync": sync_api}, checks=checks,
                    extra=extra, distributed=prepared.distributed)


@contextlib.contextmanager
def host_isolation(run: OpenRun, result: WorkerResult) -> Iterator[None]:
    """Hold the host's timing lock for the block (harness.worker.hostlock), shared under `measure.share_host`;
    the record's `env.isolation` says how. One process per run takes it on each host: a plain run's worker;
    for a data-parallel run the runner (HELD_VARIABLE), else its local rank 0."""
    share = run.measure.share_host
    if variables().host_lock_held:  # a data-parallel run's replica: the runner holds it for the run
        result.isolation = {"mode": "shared" if share else "exclusive", "held_by": "the runner"}
        yield
        return
    if run.replica is not None and run.replica.local_rank != 0:
        result.isolation = {"mode": "shared" if share else "exclusive", "held_by": "local rank 0"}
        yield
        return
    with timing_lock(share, run.who or {}, progress_writer()) as isolation:
        result.isolation = isolation
        yield


def _wait_apart(result: WorkerResult) -> None:
    """The wait for the host's timing lock (another session's run) out of the `steps` phase, into its own
    `lock_wait` phase: not the run's time."""
    waited = float(Isolation.of(result.isolation).waited_s or 0.0)
    phases = result.phases_s
    if waited > 0 and phases is not None and "steps" in phases:
        phases["steps"] = round(max(0.0, phases["steps"] - waited), 3)
        phases["lock_wait"] = round(waited, 3)


def _timed_steps(prepared, run: OpenRun, probe: bool, ctx: RunContext, result: WorkerResult, phases: Phases):
    """(timing, work per step, how the clock syncs, checks, the backend's extra timing figures) of a prepared
    step; the allocator's peak into `result` as the timed loop ends."""
    device = run.device
    work = run.workload.headline_per_step(run.params)
    clock, sync_api = device.clock()
    device.reset_peak()
    timing = run_timed(prepared.step, clock, run.measure, work_per_step=work,
                       telemetry=None if probe else ctx.telemetry_for(device.neutral),
                       progress=progress_writer() if run.replica is None or run.replica.rank == 0 else None,
                       steps_per_call=prepared.steps_per_call,
                       warmup_floor_steps=0 if probe else run.workload.warmup_floor(run.params))
    phases.next("after")
    result.measured = Measured(peak_allocated_bytes=device.peak_allocated_bytes())
    reserved = device.peak_reserved_bytes()
    checks = prepared.checks()  # after the timed region: a loss read as a number syncs the device
    if reserved is not None:  # only where the framework keeps one, so a record without it stays as it was
        checks = {**checks, "peak_reserved_bytes": reserved}
    extra = prepared.timing_fields()
    if not probe:
        extra.update(device.after_timing(prepared.step, timing, run.params, ctx))
    if run.measure.profile and not probe:
        profile_after(device, prepared.step, timing, run, ctx, result)
    return timing, work, sync_api, checks, extra


def profile_after(device: Device, step, timing, run: OpenRun, ctx: RunContext, result: WorkerResult) -> None:
    """The record's `profile`, captured after every timed figure is read, so the profiler's overhead never
    lands in them. Every replica of a data-parallel run runs the profiled steps (each meets the others in
    the all-reduce); rank 0's breakdown is the record's."""
    where = run.measure.profile_trace_dir
    if where and run.replica is not None:
        where = os.path.join(where, f"rank{run.replica.rank}")
    rss_before = host_peak_rss_bytes()  # the record's host_peak_rss_bytes, read at the end, includes the profiler's
    def capture(calls: int, _):
        captured = device.profile(step, calls, where)
        captured.steps = calls * timing.steps_per_call  # a call of a Keras fit step is k training steps
        return captured

    profile = profile_run(capture, timing.step_time_s(), run.measure.profile_trace_dir, ctx.warnings,
                          profiled_calls(timing.steps_per_block))
    if run.replica is None or run.replica.rank == 0:
        result.profile = Profile.of({**profile, "host_peak_rss_before_bytes": rss_before})


def note_replica(run: OpenRun, timed: TimedRun, result: WorkerResult) -> None:
    """A data-parallel replica's settings from prepare, and the peaks of every replica a process holds, for the
    record's `distributed`."""
    if timed.distributed:
        result.distributed_replica = result.distributed_replica.updated(**timed.distributed)
    if (peaks := run.device.replica_peaks()) is not None:  # a process holding several replicas
        result.distributed_replica = result.distributed_replica.updated(replica_peaks=peaks)


#: Steps per block of a data-parallel run whose scenario says `steps: auto`.
DATA_PARALLEL_STEPS = 10


def fixed_blocks(measure: Measure, ctx: RunContext) -> Measure:
    """A data-parallel run's measure: a fixed number of blocks. Every replica runs the same loop and meets
    the others in each step's all-reduce; an adaptive stop decided by each replica from its own clock
    could leave one replica waiting for a step the others never take."""
    adaptive = {k: v for k, v in (("min_time_s", measure.min_time_s), ("target_ci_pct", measure.target_ci_pct)) if v}
    if adaptive:
        ctx.warnings.append(f"{', '.join(f'{k}={v}' for k, v in adaptive.items())} ignored with replicas > 1: "
                            f"every replica runs the fixed {measure.repeats} blocks (docs/distributed.md)")
    steps = measure.steps
    if steps == AUTO:  # each replica would calibrate on its own clock and could choose another count
        steps = DATA_PARALLEL_STEPS
        ctx.warnings.append(f"steps: auto chooses one count per process, and every replica must run the same: "
                            f"{steps} steps per block with replicas > 1 (set measure.steps to choose)")
    return measure.model_copy(update={"steps": steps, "min_time_s": None, "target_ci_pct": None, "max_repeats": None})


def execute(spec: RunSpec) -> WorkerResult:
    """Run one spec in this process; return what the worker knows of its record (never raises)."""
    started = time.perf_counter()
    result = WorkerResult(started_at=utc_now())
    backend = None
    ctx = RunContext()
    try:
        backend = available_backends()[spec.backend]
        measure_run(backend, spec, ctx, result, since=started)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
        if isinstance(exc, KeyboardInterrupt):
            raise
        record_failure(result, exc, backend)
    result.warnings = list(ctx.warnings)
    # reading the environment (packages, NVML) comes after a measured run too: its `after` phase goes on over
    # it, so the run's phases add up to its duration (tens of ms, more on a cold disk cache)
    closing = Phases(result.phases_s, "after") if result.phases_s and "after" in result.phases_s else None
    result.host_peak_rss_bytes = host_peak_rss_bytes()
    result.env = {**env_mod.capture(), "framework": result.framework_env or {},
                  **({"isolation": result.isolation} if result.isolation is not None else {})}
    if closing is not None:
        closing.next(None)
    result.duration_s = time.perf_counter() - started
    return result


def record_failure(result: WorkerResult, exc: BaseException, backend: Backend | None) -> None:
    """The status an exception means in `result`, with its error, the out-of-memory evidence and, for a
    failure, the traceback."""
    result.status, evidence = classify(exc, backend)
    result.error = _error_text(exc)
    if evidence:
        result.oom_evidence = evidence
        if not isinstance(exc, (OutOfMemory, MemoryError)):
            result.error += f" [counted as out-of-memory: {evidence}]"
    if result.status == "failed":
        result.traceback = traceback.format_exc(limit=20)[-4000:]
