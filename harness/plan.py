"""The plan: one RunSpec per (sweep point x backend x device)."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.scenario import Scenario, sweep_points
from harness.workloads import WORKLOADS


def run_key(scenario: str, workload: str, backend: str, device: str, params: dict) -> str:
    """A stable id of what is measured: the same configuration gets the same key in every session."""
    text = json.dumps([scenario, workload, backend, device, params], sort_keys=True, default=str)
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

    @property
    def timeout_s(self) -> float:
        return float(self.measure.get("timeout_s", 1800))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSpec":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def with_params(self, **changes) -> "RunSpec":
        """A copy with some params changed (new run id and run key)."""
        params = {**self.params, **changes}
        return RunSpec(
            run_id=new_id(),
            session_id=self.session_id,
            run_key=run_key(self.scenario, self.workload, self.backend, self.device, params),
            scenario=self.scenario,
            workload=self.workload,
            backend=self.backend,
            device=self.device,
            params=params,
            measure=self.measure,
            seed=self.seed,
            options=self.options,
        )

    def label(self) -> str:
        """A short human description: backend on device, with the params that a sweep varies."""
        shown = ", ".join(f"{k}={v}" for k, v in self.params.items() if v is not None)
        return f"{self.backend} on {self.device}: {self.workload} ({shown})"


def build_plan(
    scenario: Scenario,
    session_id: str,
    *,
    backends: list[str] | None = None,
    devices: list[str] | None = None,
    timeout_s: float | None = None,
) -> list[RunSpec]:
    """Expand a validated scenario into run specs; `backends` / `devices` replace the file's lists."""
    workload = WORKLOADS[scenario.workload]
    measure = scenario.measure.model_dump()
    if timeout_s is not None:
        measure["timeout_s"] = float(timeout_s)
    plan = []
    for point in sweep_points(scenario):
        params = workload.validate({**scenario.params, **point}).model_dump()
        for backend in backends or scenario.backends:
            for device in devices or scenario.devices:
                plan.append(
                    RunSpec(
                        run_id=new_id(),
                        session_id=session_id,
                        run_key=run_key(scenario.name, scenario.workload, backend, device, params),
                        scenario=scenario.name,
                        workload=scenario.workload,
                        backend=backend,
                        device=device,
                        params=params,
                        measure=measure,
                        seed=scenario.seed,
                        options=dict(scenario.options.get(backend, {})),
                    )
                )
    return plan
