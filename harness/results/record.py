"""The result record: one flat, pandas-friendly row per run, typed as `Result`.

`Result` is the one place a record is assembled: the runner starts one from the RunSpec, the worker
(harness.worker.execute) measures what goes in it, and `to_dict()` gives the row the store, exports and
users' notebooks read. Its field names are the public contract: add fields freely, rename none.
A record is immutable and validated on construction (pyperf's `Run`): its parts are typed
(harness.results.parts, harness.machine.env.Environment), its params, options, api and notes read-only
mappings; a change is a copy (`updated`, `merged`, `with_note`). What is read from a record beyond its
fields (the GPU it saw, whether it failed, the capacity search it probed for) is read by its accessors here.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
from dataclasses import field
from typing import Any

from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass

from harness.fields import FrozenDict, ListOf, Number, ReadOnlyMapping, RecordPart
from harness.machine.env import Environment
from harness.results.parts import (
    BlockTiming,
    Checks,
    Distributed,
    PhaseSeconds,
    Profile,
    Telemetry,
)
from harness.workloads import WORKLOADS

SCHEMA_VERSION = 1

#: Statuses that make `harness run` exit 1. `unsupported` is an answer, not a failure.
FAILING_STATUSES = ("failed", "timeout", "oom", "diverged")


class RecordError(ValueError):
    """A row that is no record: a field of the wrong type (the message names the field)."""


@dataclass(frozen=True, config=ConfigDict(arbitrary_types_allowed=False))
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
    #: inputs, the gradient all-reduce settings, which rank failed (empty for a plain run)
    distributed: Distributed = field(default_factory=Distributed)
    #: global rate / (replicas x the median rate of the same configuration at 1 replica), where the store
    #: held that configuration when this run finished; compare and report compute it from the store too
    scaling_efficiency: Number | None = None
    params: ReadOnlyMapping = field(default_factory=FrozenDict)
    #: the backend's own options (which Keras, which compile mode), validated, defaults filled
    options: ReadOnlyMapping = field(default_factory=FrozenDict)
    api: ReadOnlyMapping = field(default_factory=FrozenDict)
    status: str | None = None
    error: str | None = None
    metric: str | None = None
    unit: str | None = None
    median: Number | None = None
    iqr: Number | None = None
    ci_low: Number | None = None
    ci_high: Number | None = None
    cv: Number | None = None
    samples: ListOf(Number | None) = ()
    step_time_s: Number | None = None
    first_step_s: Number | None = None
    #: the compilation caches this process started with: `cold` (empty), `warm` (filled by an earlier process of
    #: its configuration), `none` (its framework has no cache harness points); None in records made before
    compile_cache: str | None = None
    peak_allocated_bytes: int | None = None
    device_used_bytes: int | None = None
    host_peak_rss_bytes: int | None = None
    tflops: Number | None = None
    pct_of_peak: Number | None = None
    energy_j: Number | None = None
    avg_power_w: Number | None = None
    checks: Checks = field(default_factory=Checks)
    timing: BlockTiming = field(default_factory=BlockTiming)
    telemetry: Telemetry = field(default_factory=Telemetry)
    #: where the step's time goes, from the framework's own profiler after the timed blocks (measure.profile):
    #: seconds per step in each class and idle, the top kernels; {"error": why} where the profiler failed;
    #: empty where the run was not profiled (docs/profile.md)
    profile: Profile = field(default_factory=Profile)
    warnings: ListOf(str) = ()
    env: Environment = field(default_factory=Environment)
    started_at: str | None = None
    duration_s: Number | None = None
    #: where the run's wall time went, in seconds: the worker's phases (open_device, prepare, steps, after:
    #: harness.worker.execute.measure_run) and `process`, the rest of duration_s (the worker's start, its imports,
    #: its exit); empty where no worker ran
    phases_s: PhaseSeconds = field(default_factory=PhaseSeconds)
    #: keys of a stored row that are no field of this version (a newer version's record, the runner's notes):
    #: kept, so that a record read and written again loses nothing; not a public field
    extra: ReadOnlyMapping = field(default_factory=FrozenDict, repr=False, compare=False)
    #: the fields the row it was read from lacked (a row an earlier version stored): left out of `to_dict`, so
    #: that row is written back as it was; not a public field
    absent: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

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
        """The flat row: every field (but those the row it was read from lacked), then the notes; JSON's types."""
        row = {name: _plain(getattr(self, name)) for name in FIELDS if name not in self.absent}
        row.update({k: v for k, v in self.extra.items() if k not in row})
        return row

    @classmethod
    def from_dict(cls, row: dict) -> "Result":
        """A record from a flat row (JSON, a store row): fields it lacks (a row stored by an earlier version) take
        their defaults and stay out of `to_dict`, as do fields that are never None given as None (a frame's empty
        cell, a hand-made row); keys that are no field are kept in `extra` and written back. RecordError, naming
        the field, for a value of the wrong type."""
        known = {name: row[name] for name in FIELD_NAMES
                 if name in row and not (row[name] is None and name in NEVER_NONE)}
        try:
            return cls(**known, extra={k: v for k, v in row.items() if k not in FIELD_NAMES},
                       absent=FIELD_NAMES - known.keys())
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"])
            raise RecordError(f"record {row.get('run_id')}: field {where}: {error['msg']}") from None

    @property
    def run_s(self) -> float:
        """The run's own time: duration_s less its wait for the host's timing lock (another session's
        time, phases_s.lock_wait); 0 where no duration was recorded."""
        return max(0.0, float(self.duration_s or 0.0) - float(self.phases_s.lock_wait or 0.0))

    def updated(self, **fields) -> "Result":
        """A copy with some fields replaced, validated again (unknown names are an error)."""
        unknown = set(fields) - FIELD_NAMES
        if unknown:
            raise TypeError(f"no such field of a record: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **fields, absent=self.absent - fields.keys())

    # ------------------------------------------------------------------ accessors
    @property
    def failing(self) -> bool:
        """Whether this run failed in a way that makes `harness run` exit 1 (FAILING_STATUSES)."""
        return self.status in FAILING_STATUSES

    def merged(self, row: dict) -> "Result":
        """A copy with a flat row laid over it (a worker's result file, a replica's): its keys that are fields
        replace them, the others are kept as notes in `extra`."""
        return Result.from_dict({**self.to_dict(), **row})

    def param(self, name: str) -> Any:
        """A workload parameter's value (None where this record's workload has no such parameter)."""
        return self.params[name] if name in self.params else None

    def note(self, key: str, default: Any = None) -> Any:
        """A note kept beside the fields (`log_tail`, `oom_evidence`, `limited_by`, `timed_out_twice` ...)."""
        return self.extra[key] if key in self.extra else default

    def with_note(self, key: str, value: Any) -> "Result":
        """A copy with a note kept beside the fields; a field's name is refused (update the field itself)."""
        if key in FIELD_NAMES:
            raise KeyError(f"{key} is a field of the record, not a note")
        return dataclasses.replace(self, extra={**self.extra, key: value})

    def with_warning(self, text: str) -> "Result":
        """A copy with one more warning."""
        return self.updated(warnings=(*self.warnings, text))

    @property
    def probe_of(self) -> str | None:
        """The capacity search this record probed a batch size for, or None for a measurement. Stored as
        the row's `probe_of` key, present only on probes, so it is no field: it lives in `extra`."""
        return self.note("probe_of")

    def as_probe_of(self, capacity_id: str) -> "Result":
        """A copy marked as a probe of the capacity search `capacity_id` (its row gains `probe_of`)."""
        return self.with_note("probe_of", capacity_id)

    def gpu_size(self) -> dict:
        """The GPU memory and SM count this run saw (they tell datasheet variants apart), from its env;
        None where absent. The memory comes from the framework's report, else from NVML's list of the
        host's GPUs, the record's `cuda:N` mapped through its CUDA_VISIBLE_DEVICES."""
        framework = self.env.framework
        memory = framework.gpu_memory_bytes if framework is not None else None
        sms = framework.gpu_multiprocessors if framework is not None else None
        device = str(self.device or "")
        if memory is None and device.startswith("cuda:"):
            memory = self.env.gpu_memory_bytes(_visible_gpu(device, self.env))
        return {"memory_bytes": memory, "sm_count": sms}

    def gpu_uuid(self) -> str | None:
        """The UUID of the host's GPU this run ran on (its `cuda:N` mapped through its CUDA_VISIBLE_DEVICES, as
        NVML listed it); None off a GPU or where not listed."""
        device = str(self.device or "")
        if not device.startswith("cuda:"):
            return None
        index = _visible_gpu(device, self.env)
        return next((g.uuid for g in self.env.gpus or () if g.index == index), None)


def _visible_gpu(device: str, env: Environment) -> int:
    """The host's index (NVML's) of a `cuda:N` device, N mapped through the run's CUDA_VISIBLE_DEVICES."""
    try:
        index = int(device.split(":", 1)[1])
    except ValueError:
        return -1
    visible = env.variable("CUDA_VISIBLE_DEVICES").split(",")
    if 0 <= index < len(visible) and visible[index].strip().isdigit():
        index = int(visible[index])
    return index


def _plain(value: Any) -> Any:
    """A field's value as JSON holds it: a part as its object, a read-only mapping as a dict, a tuple as a list."""
    if isinstance(value, RecordPart):
        return value.to_dict()
    if isinstance(value, dict):
        return dict(value)
    return list(value) if isinstance(value, tuple) else value


#: The public fields, in display order.
FIELDS = tuple(f.name for f in dataclasses.fields(Result) if f.name not in ("extra", "absent"))
FIELD_NAMES = frozenset(FIELDS)
#: Fields that always hold a value (a count, a part, a mapping, a list): None in a row means not recorded.
NEVER_NONE = frozenset(f.name for f in dataclasses.fields(Result) if f.name in FIELD_NAMES and f.default is not None)


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
