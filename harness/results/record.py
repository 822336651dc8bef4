"""The result record: one flat, pandas-friendly row per run, typed as `Result`.

`Result` is the one place a record is assembled: the runner starts one from the RunSpec, the worker
(harness.worker.execute) fills what it measured, and `to_dict()` gives the row the store, exports and
users' notebooks read. Its field names are the public contract: add fields freely, rename none.
What is read from a record beyond its fields (the GPU it saw, whether it failed, the capacity search
it probed for) is read by its accessors here, in one place.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from typing import Any

from harness.workloads import WORKLOADS

SCHEMA_VERSION = 1

#: Statuses that make `harness run` exit 1. `unsupported` is an answer, not a failure.
FAILING_STATUSES = ("failed", "timeout", "oom", "diverged")


@dataclass
class Result:
    """One run's result record. A figure that could not be measured is None, never zero."""

    schema_version: int = SCHEMA_VERSION
    run_id: str | None = None
    session_id: str | None = None
    run_key: str | None = None
    scenario: str | None = None
    workload: str | None = None
    backend: str | None = None
    framework_version: str | None = None
    device: str | None = None
    device_requested: str | None = None
    device_name: str | None = None
    #: which of its configuration's worker processes (measure.processes) this run was, from 0
    replicate: int = 0
    #: data-parallel replicas (params.replicas; 1 for a plain run): the headline is then global, every
    #: replica's items per second, and `params.batch_size` is per replica (docs/distributed.md)
    replicas: int = 1
    #: a data-parallel run's layout and settings: world_size, nodes, launcher, per-rank devices, peaks and
    #: inputs, the gradient all-reduce settings, which rank failed ({} for a plain run)
    distributed: dict = field(default_factory=dict)
    #: global rate / (replicas x the median rate of the same configuration at 1 replica), where the store
    #: held that configuration when this run finished; compare and report compute it from the store too
    scaling_efficiency: float | None = None
    params: dict = field(default_factory=dict)
    #: the backend's own options (which Keras, which compile mode), validated, defaults filled
    options: dict = field(default_factory=dict)
    api: dict = field(default_factory=dict)
    status: str | None = None
    error: str | None = None
    metric: str | None = None
    unit: str | None = None
    median: float | None = None
    iqr: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    cv: float | None = None
    samples: list = field(default_factory=list)
    step_time_s: float | None = None
    first_step_s: float | None = None
    #: the compilation caches this process started with: `cold` (empty), `warm` (filled by an earlier process of
    #: its configuration), `none` (its framework has no cache harness points); None in records made before
    compile_cache: str | None = None
    peak_allocated_bytes: int | None = None
    device_used_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    tflops: float | None = None
    pct_of_peak: float | None = None
    energy_j: float | None = None
    avg_power_w: float | None = None
    checks: dict = field(default_factory=dict)
    timing: dict = field(default_factory=dict)
    telemetry: dict = field(default_factory=dict)
    #: where the step's time goes, from the framework's own profiler after the timed blocks (measure.profile):
    #: seconds per step in each class and idle, the top kernels; {"error": why} where the profiler failed;
    #: {} where the run was not profiled (docs/profile.md)
    profile: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)
    env: dict = field(default_factory=dict)
    started_at: str | None = None
    duration_s: float | None = None
    #: where the run's wall time went, in seconds: the worker's phases (open_device, prepare, steps, after:
    #: harness.worker.execute.measure_run) and `process`, the rest of duration_s (the worker's start, its imports,
    #: its exit); {} where no worker ran
    phases_s: dict = field(default_factory=dict)
    #: keys of a stored row that are no field of this version (a newer version's record): kept, so that a
    #: record read and written again loses nothing; not a public field
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def planned(cls, spec) -> "Result":
        """The record of a RunSpec before anything is measured."""

        workload = WORKLOADS.get(spec.workload)
        replicas = workload.replicas(dict(spec.params)) if workload else 1
        return cls(replicas=replicas,
            run_id=spec.run_id, session_id=spec.session_id, run_key=spec.run_key, scenario=spec.scenario,
            workload=spec.workload, backend=spec.backend, device=spec.device, device_requested=spec.device,
            params=dict(spec.params), options=dict(spec.options or {}), replicate=int(getattr(spec, "replicate", 0)),
            metric=workload.metric if workload else None, unit=workload.unit if workload else None,
        )

    def to_dict(self) -> dict:
        """The flat row (shallow copies of the containers)."""
        row = {name: _copy(getattr(self, name)) for name in FIELDS}
        row.update({k: v for k, v in self.extra.items() if k not in row})
        return row

    @classmethod
    def from_dict(cls, row: dict) -> "Result":
        """A record from a flat row (JSON, a store row): missing fields take their defaults (rows stored by
        earlier versions), keys that are no field are kept in `extra` and written back by to_dict."""
        known = {name: _copy(row[name]) for name in FIELD_NAMES if name in row}
        return cls(**known, extra={k: v for k, v in row.items() if k not in FIELD_NAMES})

    def updated(self, **fields) -> "Result":
        """A copy with some fields replaced (unknown names are an error)."""
        return dataclasses.replace(self, **fields)

    # ------------------------------------------------------------------ accessors
    @property
    def failing(self) -> bool:
        """Whether this run failed in a way that makes `harness run` exit 1 (FAILING_STATUSES)."""
        return self.status in FAILING_STATUSES

    def merged(self, row: dict) -> "Result":
        """A copy with a flat row laid over it (a worker's result file, a replica's): its keys that are fields
        replace them, the others are kept as notes in `extra`."""
        return Result.from_dict({**self.to_dict(), **row})

    def note(self, key: str, default: Any = None) -> Any:
        """A note kept beside the fields (`log_tail`, `oom_evidence`, `limited_by`, `timed_out_twice` ...)."""
        return self.extra.get(key, default)

    def set_note(self, key: str, value: Any) -> None:
        """Keep a note beside the fields; a field's name is refused (set the field itself)."""
        if key in FIELD_NAMES:
            raise KeyError(f"{key} is a field of the record, not a note")
        self.extra[key] = value

    @property
    def probe_of(self) -> str | None:
        """The capacity search this record probed a batch size for, or None for a measurement. Stored as
        the row's `probe_of` key, present only on probes, so it is no field: it lives in `extra`."""
        return self.extra.get("probe_of")

    def as_probe_of(self, capacity_id: str) -> "Result":
        """A copy marked as a probe of the capacity search `capacity_id` (its row gains `probe_of`)."""
        return self.updated(extra={**self.extra, "probe_of": capacity_id})

    def gpu_size(self) -> dict:
        """The GPU memory and SM count this run saw (they tell datasheet variants apart), from its env;
        None where absent. The memory comes from the framework's report, else from NVML's list of the
        host's GPUs, the record's `cuda:N` mapped through its CUDA_VISIBLE_DEVICES."""
        env = self.env if isinstance(self.env, dict) else {}
        framework = env.get("framework") if isinstance(env.get("framework"), dict) else {}
        memory, sms = framework.get("gpu_memory_bytes"), framework.get("gpu_multiprocessors")
        device = str(self.device or "")
        if memory is None and device.startswith("cuda:") and isinstance(env.get("gpus"), list):
            index = _visible_gpu(device, env)
            memory = next((g.get("memory_total_bytes") for g in env["gpus"]
                           if isinstance(g, dict) and g.get("index") == index), None)
        return {"memory_bytes": memory, "sm_count": sms}


def _visible_gpu(device: str, env: dict) -> int:
    """The host's index (NVML's) of a `cuda:N` device, N mapped through the run's CUDA_VISIBLE_DEVICES."""
    try:
        index = int(device.split(":", 1)[1])
    except ValueError:
        return -1
    variables = env.get("variables") if isinstance(env.get("variables"), dict) else {}
    visible = str(variables.get("CUDA_VISIBLE_DEVICES") or "").split(",")
    if 0 <= index < len(visible) and visible[index].strip().isdigit():
        index = int(visible[index])
    return index


def _copy(value: Any) -> Any:
    return dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value


#: The public fields, in display order.
FIELDS = tuple(f.name for f in dataclasses.fields(Result) if f.name != "extra")
FIELD_NAMES = frozenset(FIELDS)


def utc_now() -> str:
    """Now, UTC, ISO 8601."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def write_json_atomic(path, data: dict) -> None:
    """Write JSON to path via a temporary file and rename, so readers never see half a file (a worker's
    result, read by the runner; a run's spec, polled for by a worker started ahead)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, default=str, allow_nan=True)
    os.replace(tmp, path)
