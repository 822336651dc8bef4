"""The worker: executes one run in its own process (`python -m harness.worker SPEC.json RESULT.json`).

Frameworks are imported here and only here. The result is written as JSON (never pickle), atomically,
so the runner sees either a whole result or none.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

from harness import env as env_mod
from harness import stats
from harness.backend import RunContext, available_backends
from harness.errors import Diverged, OutOfMemory, Unsupported, WrongResult
from harness.peaks import pct_of_peak
from harness.record import utc_now
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
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= 2000 else text[:2000] + " ..."


def _is_oom_type(exc: BaseException) -> bool:
    """Whether the exception's own type says out-of-memory (as opposed to a message we matched)."""
    names = {t.__name__ for t in type(exc).__mro__}
    return bool(names & {"MemoryError", "OutOfMemory", "OutOfMemoryError", "ResourceExhaustedError"})


def classify(exc: BaseException, backend) -> str:
    """The status an exception means."""
    if isinstance(exc, Unsupported):
        return "unsupported"
    if isinstance(exc, (OutOfMemory, MemoryError)):
        return "oom"
    if isinstance(exc, Diverged):
        return "diverged"
    if isinstance(exc, WrongResult):
        return "failed"
    try:
        status = backend.classify_error(exc) if backend is not None else None
    except Exception:
        status = None
    return status or "failed"


def complete(spec: dict, outcome: dict, ctx: RunContext) -> dict:
    """Turn a backend's outcome into record fields: statistics, TFLOP/s, % of peak, memory, telemetry, env."""
    fields = dict(outcome)
    samples = [float(s) for s in fields.get("samples") or []]
    fields["samples"] = samples
    summary = stats.summarize(samples)
    fields.update(median=summary.median, iqr=summary.iqr, ci_low=summary.ci_low, ci_high=summary.ci_high, cv=summary.cv)
    warnings = list(ctx.warnings)
    if samples:
        warnings.extend(summary.warnings)
        change = stats.drift(samples)
        if change is not None and change < -stats.DRIFT_WARN:
            warnings.append(
                f"rate fell {-change:.0%} from the first to the last timed block (first {samples[0]:.4g}, last "
                f"{samples[-1]:.4g}): the device slowed while measured (throttling, or other load on the machine?)"
            )
    workload = WORKLOADS[spec["workload"]]
    params = workload.validate(spec["params"])
    if fields.get("tflops") is None and summary.median is not None:
        if workload.metric == "tflops":
            fields["tflops"] = summary.median
        else:
            flops = workload.flops_per_step(params)
            if flops:
                fields["tflops"] = summary.median * flops / workload.items_per_step(params) / 1e12
    fields["pct_of_peak"] = pct_of_peak(fields.get("tflops"), fields.get("device_name"), workload.peak_precision(params))
    telemetry = ctx.telemetry.figures() if ctx.telemetry is not None else {}
    fields["telemetry"] = telemetry
    if telemetry.get("sm_clock_min_mhz") and telemetry.get("sm_clock_max_mhz"):
        if telemetry["sm_clock_min_mhz"] < 0.9 * telemetry["sm_clock_max_mhz"]:
            warnings.append(
                f"SM clock fell to {telemetry['sm_clock_min_mhz']} MHz during the timed region "
                f"(max {telemetry['sm_clock_max_mhz']} MHz): throttling"
            )
    fields["energy_j"] = telemetry.get("energy_j")
    fields["avg_power_w"] = telemetry.get("avg_power_w")
    if fields.get("device_used_bytes") is None:
        fields["device_used_bytes"] = telemetry.get("device_used_bytes")
    if telemetry.get("energy_j") and summary.median:
        timed = telemetry.get("timed_seconds") or 0
        work = summary.median * timed
        telemetry["per_joule"] = work / telemetry["energy_j"] if timed else None  # images/J or TFLOP/J
    fields["warnings"] = warnings
    return fields


def execute(spec: dict) -> dict:
    """Run one spec in this process; return the fields the worker knows (never raises)."""
    started = time.perf_counter()
    fields: dict = {"started_at": utc_now()}
    backend = None
    ctx = RunContext()
    try:
        backend = available_backends()[spec["backend"]]
        outcome = backend.execute(spec, ctx)
        status = outcome.pop("status", None) or "ok"
        fields.update(complete(spec, outcome, ctx))
        fields["status"] = status
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a status
        if isinstance(exc, KeyboardInterrupt):
            raise
        fields["status"] = classify(exc, backend)
        fields["error"] = _error_text(exc)
        if fields["status"] == "oom" and not _is_oom_type(exc):
            fields["error"] += (" [counted as out-of-memory: this allocation failure is what the library raises "
                                "when device memory runs out]")
        if fields["status"] == "failed":
            fields["traceback"] = traceback.format_exc(limit=20)[-4000:]
        partial = getattr(exc, "partial", None)
        if isinstance(partial, dict):
            fields.update(partial)
        fields["warnings"] = list(ctx.warnings)
    fields["host_peak_rss_bytes"] = host_peak_rss_bytes()
    framework_env = fields.pop("env", None) or {}
    fields["env"] = {**env_mod.capture(), "framework": framework_env}
    fields["duration_s"] = time.perf_counter() - started
    return fields


def write_json_atomic(path: str, data: dict) -> None:
    """Write JSON to path via a temporary file and rename, so readers never see half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, default=str, allow_nan=True)
    os.replace(tmp, path)


def apply_memory_limit() -> None:
    """Cap this process's data segment at HARNESS_MEMORY_LIMIT_BYTES (a smaller machine, emulated).

    RLIMIT_DATA bounds private writable memory (heap and anonymous mappings, Linux >= 4.7), so
    framework allocations beyond it fail as out-of-memory errors, while the large virtual
    reservations of shared libraries that RLIMIT_AS would also count do not.
    """
    limit = os.environ.get("HARNESS_MEMORY_LIMIT_BYTES")
    if not limit:
        return
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (int(limit), int(limit)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    apply_memory_limit()
    spec_path, result_path = argv
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    fields = execute(spec)
    write_json_atomic(result_path, fields)
    return 0


def exit_now(code: int) -> None:
    """Leave without interpreter teardown: the result is on disk, and teardown can deadlock.

    After an allocation failure in the middle of a backward pass, torch 2.0.1 keeps the autograd
    graph alive in a thread-local queue; at exit its destructor frees tensors made with
    torch.from_numpy, whose deleter waits for a GIL that finalization will never give back
    (seen with gdb: __call_tls_dtors -> ReadyQueue -> tensor_from_numpy deleter -> take_gil).
    Nothing a worker owns needs an orderly shutdown, so it skips exit handlers altogether.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the exit
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
