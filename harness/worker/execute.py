"""One run, inside the worker: the core's half of the backend seam.

The backend opens the device and prepares the step (harness.seam.adapter); everything else is here,
written once for every backend: the timed loop, rates and TFLOP/s, % of peak, telemetry, the
status (out-of-memory through the backend's hook, the workload's verdict on its checks), and
the record's fields.
"""

from __future__ import annotations

import time
import traceback

from harness.errors import Diverged, OutOfMemory, Unsupported, WrongResult, first_line
from harness.machine import env as env_mod, nvml
from harness.machine.peaks import pct_of_peak, unknown_device_warning
from harness.results import stats
from harness.results.record import utc_now
from harness.seam.adapter import RunInputs
from harness.seam.backend import Backend, RunContext, available_backends
from harness.seam.distributed import Replica, replica_device, threads_per_replica
from harness.worker.measure import run_timed
from harness.workloads import WORKLOADS


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
        import resource

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


def summarize(samples: list[float], warnings: list[str]) -> dict:
    """The headline's statistics from per-block samples, with the warnings they call for."""
    summary = stats.summarize(samples)
    if samples:
        warnings.extend(summary.warnings)
        change = stats.drift(samples)
        if change is not None and change < -stats.DRIFT_WARN:
            warnings.append(
                f"rate fell {-change:.0%} from the first to the last timed block (first {samples[0]:.4g}, last "
                f"{samples[-1]:.4g}): the device slowed while measured (throttling, or other load on the machine?)"
            )
    return dict(median=summary.median, iqr=summary.iqr, ci_low=summary.ci_low, ci_high=summary.ci_high, cv=summary.cv)


def telemetry_fields(ctx: RunContext, median: float | None, warnings: list[str]) -> dict:
    """NVML figures of the timed region: power, energy, clocks (with a throttling warning), memory used."""
    telemetry = ctx.telemetry.figures() if ctx.telemetry is not None else {}
    low, high = telemetry.get("sm_clock_min_mhz"), telemetry.get("sm_clock_max_mhz")
    if low and high and low < 0.9 * high:
        warnings.append(f"SM clock fell to {low} MHz during the timed region (max {high} MHz): throttling")
    if telemetry.get("energy_j") and median:
        timed = telemetry.get("timed_seconds") or 0
        telemetry["per_joule"] = median * timed / telemetry["energy_j"] if timed else None  # images/J or TFLOP/J
    return {"telemetry": telemetry, "energy_j": telemetry.get("energy_j"), "avg_power_w": telemetry.get("avg_power_w"),
            "device_used_bytes": telemetry.get("device_used_bytes")}


def progress_writer():
    """Progress events as JSON lines appended to $HARNESS_PROGRESS_FILE (the runner reads them); None without it."""
    import json
    import os

    path = os.environ.get("HARNESS_PROGRESS_FILE")
    if not path:
        return None

    def write(phase: str, **figures) -> None:
        try:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"phase": phase, "t": time.time(), **figures}) + "\n")
        except OSError:  # progress is a courtesy: never let it fail a run
            pass

    return write


def gpu_size(neutral: str, framework_env: dict) -> dict:
    """The GPU's memory and SM count (tell datasheet variants apart): from the framework, else NVML."""
    memory, sms = framework_env.get("gpu_memory_bytes"), framework_env.get("gpu_multiprocessors")
    if memory is None:
        index = nvml.nvml_index(int(neutral.split(":", 1)[1]))
        memory = next((g["memory_total_bytes"] for g in nvml.gpus() if g["index"] == index), None)
    return {"memory_bytes": memory, "sm_count": sms}


class Phases:
    """Where a worker's wall time went: seconds per phase, written into `into` as each ends, so a run that
    fails keeps the phases it finished and the one it failed in."""

    def __init__(self, into: dict, first: str):
        self.into, self.name, self.last = into, first, time.perf_counter()

    def next(self, name: str | None) -> None:
        """End the current phase and start `name` (None: end it only)."""
        now = time.perf_counter()
        if self.name is not None:
            self.into[self.name] = round(self.into.get(self.name, 0.0) + now - self.last, 3)
        self.name, self.last = name, now


def measure_run(backend: Backend, spec: dict, ctx: RunContext, fields: dict) -> None:
    """Open the device, prepare the step, time it and fill `fields` with what was measured.

    Raises whatever the backend raises; the fields known by then (the device's identity) stay.
    `fields["phases_s"]` gets the seconds of each phase: open_device (the framework's import and the
    device's set-up), prepare (the model, the inputs, the step), steps (the first step, warm-up and timed
    blocks), after (checks, the launch probe, the timed region's read-backs).
    """
    phases = Phases(fields.setdefault("phases_s", {}), "open_device")
    try:
        _measure_run(backend, spec, ctx, fields, phases)
    finally:
        phases.next(None)


def _measure_run(backend: Backend, spec: dict, ctx: RunContext, fields: dict, phases: Phases) -> None:
    workload = WORKLOADS[spec["workload"]]
    params = workload.validate(spec["params"])
    options = backend.validate_options(spec.get("options") or {})
    threads = spec.get("cpu_threads") or {}
    measure = spec.get("measure") or {}
    replica = Replica.from_env() if workload.replicas(params) > 1 else None
    if replica is None and workload.replicas(params) > 1:
        raise Unsupported(f"replicas={workload.replicas(params)} needs the data-parallel launch (harness.session.runner); "
                          "this worker was started as a single process")
    if replica is None:
        device = backend.open_device(spec.get("device") or "auto", threads)
    else:
        threads = threads_per_replica(threads, replica.local_world_size)
        device = backend.open_replica(replica_device(spec.get("device") or "auto", replica.local_rank), threads, replica)
        measure = fixed_blocks(measure, ctx)
        fields["distributed_replica"] = {"world_size": replica.world_size, "local_world_size": replica.local_world_size,
                                         "timing": "rank 0's clock; every timed block starts and ends at a barrier "
                                                   "of all replicas, so it covers the slowest"}
    fields.update(device.identity())
    phases.next("prepare")
    reason = backend.unsupported_reason(workload.name, params.model_dump(), device.neutral, options)
    if reason:  # asked before the worker too, but then the device may have been `auto`
        raise Unsupported(reason)
    probe = bool(measure.get("probe"))  # a capacity probe: no telemetry, no launch probe, no autotuning
    run = RunInputs(seed=int(spec.get("seed") or 0), options=options, ctx=ctx, probe=probe, replica=replica)
    with device.scope():
        prepared = backend.prepare(workload.name, params, device, run)
        fields["env"] = device.identity()["env"]  # again: the settings prepare put in force (TF32, threads)
        phases.next("steps")
        try:
            work = workload.headline_per_step(params)
            clock, sync_api = device.clock()
            device.reset_peak()
            timing = run_timed(prepared.step, clock, measure, work_per_step=work,
                               telemetry=None if probe else ctx.telemetry_for(device.neutral),
                               progress=progress_writer() if replica is None or replica.rank == 0 else None)
            phases.next("after")
            fields["peak_allocated_bytes"] = device.peak_allocated_bytes()
            checks = prepared.checks()  # after the timed region: a loss read as a number syncs the device
            extra = prepared.timing_fields()
            if not probe:
                extra.update(device.after_timing(prepared.step, timing, params, ctx))
        finally:
            prepared.close()
    samples = timing.rates(work)
    warnings = ctx.warnings
    fields.update(summarize(samples, warnings))
    if replica is not None and prepared.distributed:
        fields["distributed_replica"].update(prepared.distributed)
    if replica is not None and (peaks := device.replica_peaks()) is not None:  # a process holding several replicas
        fields["distributed_replica"]["replica_peaks"] = peaks
    fields.update(api={**prepared.api, "sync": sync_api}, samples=samples, step_time_s=timing.step_time_s(),
                  first_step_s=timing.first_step_s, checks=checks, timing=timing.fields(**extra))
    median = fields["median"]
    if workload.metric == "tflops":
        fields["tflops"] = median
    elif median is not None and workload.flops_per_step(params):
        fields["tflops"] = median * workload.flops_per_step(params) / workload.items_per_step(params) / 1e12
    precision = workload.peak_precision(params)
    if device.neutral.startswith("cuda:"):  # a datasheet peak is a GPU's; the CPU has none to miss
        size = gpu_size(device.neutral, fields.get("env") or {})
        # TFLOP/s are global (every replica's work): % of peak is of all the replicas' GPUs together
        per_gpu = fields.get("tflops") / workload.replicas(params) if fields.get("tflops") else None
        fields["pct_of_peak"] = pct_of_peak(per_gpu, fields.get("device_name"), precision, **size)
        missing = unknown_device_warning(fields.get("device_name"), precision=precision, **size)
        if missing:
            warnings.append(missing)
    fields.update(telemetry_fields(ctx, median, warnings))
    status, error = workload.verdict(checks, params)
    fields["status"] = status or "ok"
    if error:
        fields["error"] = error


def fixed_blocks(measure: dict, ctx: RunContext) -> dict:
    """A data-parallel run's measure: a fixed number of blocks. Every replica runs the same loop and meets
    the others in each step's all-reduce; an adaptive stop decided by each replica from its own clock
    could leave one replica waiting for a step the others never take."""
    adaptive = {k: measure.get(k) for k in ("min_time_s", "target_ci_pct") if measure.get(k)}
    if adaptive:
        ctx.warnings.append(f"{', '.join(f'{k}={v}' for k, v in adaptive.items())} ignored with replicas > 1: "
                            f"every replica runs the fixed {measure.get('repeats')} blocks (docs/distributed.md)")
    return {**measure, "min_time_s": None, "target_ci_pct": None, "max_repeats": None}


def execute(spec: dict) -> dict:
    """Run one spec in this process; return the record fields the worker knows (never raises)."""
    started = time.perf_counter()
    fields: dict = {"started_at": utc_now()}
    backend = None
    ctx = RunContext()
    try:
        backend = available_backends()[spec["backend"]]
        measure_run(backend, spec, ctx, fields)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
        if isinstance(exc, KeyboardInterrupt):
            raise
        fields["status"], evidence = classify(exc, backend)
        fields["error"] = _error_text(exc)
        if evidence:
            fields["oom_evidence"] = evidence
            if not isinstance(exc, (OutOfMemory, MemoryError)):
                fields["error"] += f" [counted as out-of-memory: {evidence}]"
        if fields["status"] == "failed":
            fields["traceback"] = traceback.format_exc(limit=20)[-4000:]
    fields["warnings"] = list(ctx.warnings)
    fields["host_peak_rss_bytes"] = host_peak_rss_bytes()
    framework_env = fields.pop("env", None) or {}
    fields["env"] = {**env_mod.capture(), "framework": framework_env}
    fields["duration_s"] = time.perf_counter() - started
    return fields
