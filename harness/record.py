"""The result record: one flat, pandas-friendly row per run (DESIGN.md names the public fields)."""

from __future__ import annotations

import datetime as _dt

SCHEMA_VERSION = 1

STATUSES = ("ok", "failed", "timeout", "oom", "unsupported", "diverged")
#: Statuses that make `harness run` exit 1. `unsupported` is an answer, not a failure.
FAILING_STATUSES = ("failed", "timeout", "oom", "diverged")

#: The public fields, in display order. Add fields freely; rename none.
FIELDS = (
    "schema_version", "run_id", "session_id", "run_key", "scenario", "workload", "backend", "framework_version",
    "device", "device_requested", "device_name", "params", "api", "status", "error", "metric", "unit",
    "median", "iqr", "ci_low", "ci_high", "cv", "samples", "step_time_s", "first_step_s",
    "peak_allocated_bytes", "device_used_bytes", "host_peak_rss_bytes", "tflops", "pct_of_peak",
    "energy_j", "avg_power_w", "checks", "timing", "telemetry", "warnings", "env", "started_at", "duration_s",
)


def utc_now() -> str:
    """Now, UTC, ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def blank_record(spec) -> dict:
    """A record for a RunSpec with every field present and nothing measured (all None)."""
    from harness.workloads import WORKLOADS

    workload = WORKLOADS.get(spec.workload)
    record = {name: None for name in FIELDS}
    record.update(
        schema_version=SCHEMA_VERSION,
        run_id=spec.run_id,
        session_id=spec.session_id,
        run_key=spec.run_key,
        scenario=spec.scenario,
        workload=spec.workload,
        backend=spec.backend,
        device=spec.device,
        device_requested=spec.device,
        params=dict(spec.params),
        api={},
        checks={},
        timing={},
        telemetry={},
        warnings=[],
        samples=[],
        metric=workload.metric if workload else None,
        unit=workload.unit if workload else None,
        env={},
    )
    return record
