"""Specs as the worker hands them to a backend, built by the same RunSpec the planner uses."""

from harness.plan import RunSpec
from harness.workloads import get_workload


def backend_spec(backend: str, workload: str, params: dict, measure: dict, *, device: str = "cpu", seed: int = 0,
                 options: dict | None = None) -> dict:
    """A spec dict with validated, defaulted params (docs/architecture.md describes its keys)."""
    return RunSpec(
        run_id="test-run",
        session_id="test-session",
        run_key="test-key",
        scenario="test",
        workload=workload,
        backend=backend,
        device=device,
        params=get_workload(workload).validate(params).model_dump(),
        measure=dict(measure),
        seed=seed,
        options=dict(options or {}),
    ).to_dict()
