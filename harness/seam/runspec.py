"""What one run is, as the session hands it to a worker: the RunSpec, and the ids that name it.

Both sides of the worker boundary hold it: the session plans and starts runs from it
(harness.session), the worker executes one (harness.worker.execute) and a backend launches the
replicas of a data-parallel one (Backend.launch). It travels to the worker as JSON (to_dict,
from_dict), its measure settings a typed `Measure` on both sides.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import Any

from harness.timing.settings import Measure
from harness.workloads import WORKLOADS


def run_key(scenario: str, workload: str, backend: str, device: str, params: dict, options: dict | None = None) -> str:
    """A stable id of what is measured: the same configuration gets the same key in every session.

    The backend's options (which Keras, which compile mode) are part of the configuration. A
    parameter at its workload's quiet default (`replicas: 1`) is left out, so records made before
    that parameter existed keep their key.
    """
    quiet = getattr(WORKLOADS.get(workload), "quiet_defaults", None) or {}
    params = {k: v for k, v in params.items() if not (k in quiet and v == quiet[k])}
    parts = [scenario, workload, backend, device, params] + ([options] if options else [])
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def new_id() -> str:
    """A fresh unique id (for runs and sessions)."""
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class RunSpec:
    """Everything a worker needs to execute one run; travels to it as JSON."""

    run_id: str
    session_id: str
    run_key: str
    scenario: str
    workload: str
    backend: str
    device: str
    params: dict[str, Any]
    #: the scenario's `measure:` block (a mapping given here is validated into one)
    measure: Measure
    seed: int
    options: dict[str, Any] = field(default_factory=dict)
    cpu_threads: dict[str, Any] = field(default_factory=dict)
    #: Which of the configuration's `measure.processes` worker processes this is (0-based); same run_key.
    replicate: int = 0
    #: A capacity probe (harness.session.capacity): no telemetry, no launch probe, no autotuning sweep.
    probe: bool = False

    def __post_init__(self):
        if not isinstance(self.measure, Measure):  # frozen: the validated settings replace the mapping given
            object.__setattr__(self, "measure", Measure.model_validate(self.measure or {}))

    @property
    def timeout_s(self) -> float:
        """Seconds the run may take before its worker is stopped (measure.timeout_s)."""
        return float(self.measure.timeout_s)

    def to_dict(self) -> dict:
        """The spec file's JSON object (every field; `probe` only on a probe, so a plan's entries stay as they were)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["measure"] = self.measure.model_dump()
        if not self.probe:
            del out["probe"]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        """A spec from its JSON object (or a plan's entry, of any version): keys that are no field are ignored, and
        the measure is validated (a `probe` inside it, as an earlier version wrote it, is the spec's)."""
        given = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        measure = dict(given.get("measure") or {})
        if measure.pop("probe", False):
            given["probe"] = True
        return cls(**{**given, "measure": Measure.from_stored(measure)})

    def param(self, name: str) -> Any:
        """A workload parameter's value (None where this run's workload has no such parameter)."""
        return self.params[name] if name in self.params else None

    def with_params(self, **changes) -> "RunSpec":
        """A copy with some params changed (new run id and run key)."""
        params = {**self.params, **changes}
        return replace(self, run_id=new_id(), params=params,
                       run_key=run_key(self.scenario, self.workload, self.backend, self.device, params, self.options))

    def with_measure(self, **changes) -> "RunSpec":
        """A copy with some measure settings changed (validated again)."""
        return replace(self, measure=Measure.model_validate({**self.measure.model_dump(), **changes}))

    def process_of(self) -> str:
        """` [process 2/4]` (`[process 2/4-10]` under `processes: auto`), or '' for a configuration of one process."""
        least, most = self.measure.process_bounds()
        return f" [process {self.replicate + 1}/{least if least == most else f'{least}-{most}'}]" if most > 1 else ""

    def label(self) -> str:
        """A short human description: backend on device, with the params that a sweep varies."""
        shown = ", ".join([f"{k}={v}" for k, v in self.params.items() if v is not None]
                          + [f"{k}={v}" for k, v in self.options.items() if v is not None])
        of = self.process_of()
        return f"{self.backend} on {self.device}: {self.workload} ({shown}){of}"
