"""What one run is, as the session hands it to a worker: the RunSpec, and the ids that name it.

Both sides of the worker boundary hold it: the session plans and starts runs from it
(harness.session), the worker executes one (harness.worker.execute) and a backend launches the
replicas of a data-parallel one (Backend.launch). It travels to the worker as JSON (to_dict,
from_dict).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.timing.settings import process_bounds
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
    measure: dict[str, Any]
    seed: int
    options: dict[str, Any] = field(default_factory=dict)
    cpu_threads: dict[str, Any] = field(default_factory=dict)
    #: Which of the configuration's `measure.processes` worker processes this is (0-based); same run_key.
    replicate: int = 0

    @property
    def timeout_s(self) -> float:
        """Seconds the run may take before its worker is stopped (measure.timeout_s)."""
        return float(self.measure.get("timeout_s", 1800))

    def to_dict(self) -> dict:
        """The spec file's JSON object (every field)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        """A spec from its JSON object; keys that are no field are ignored."""
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def with_params(self, **changes) -> "RunSpec":
        """A copy with some params changed (new run id and run key)."""
        params = {**self.params, **changes}
        return RunSpec(
            run_id=new_id(),
            session_id=self.session_id,
            run_key=run_key(self.scenario, self.workload, self.backend, self.device, params, self.options),
            scenario=self.scenario,
            workload=self.workload,
            backend=self.backend,
            device=self.device,
            params=params,
            measure=self.measure,
            seed=self.seed,
            options=self.options,
            cpu_threads=self.cpu_threads,
            replicate=self.replicate,
        )

    def process_of(self) -> str:
        """` [process 2/4]` (`[process 2/4-10]` under `processes: auto`), or '' for a configuration of one process."""
        least, most = process_bounds(self.measure)
        return f" [process {self.replicate + 1}/{least if least == most else f'{least}-{most}'}]" if most > 1 else ""

    def label(self) -> str:
        """A short human description: backend on device, with the params that a sweep varies."""
        shown = ", ".join([f"{k}={v}" for k, v in self.params.items() if v is not None]
                          + [f"{k}={v}" for k, v in self.options.items() if v is not None])
        of = self.process_of()
        return f"{self.backend} on {self.device}: {self.workload} ({shown}){of}"
