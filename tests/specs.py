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


def run_backend(backend, spec: dict, ctx=None) -> dict:
    """Run a spec through the core's half of the seam in this process, as the worker does; the record
    fields measured. Raises what the backend raised (Unsupported, an out-of-memory error...)."""
    from harness.backend import RunContext
    from harness.execute import measure_run

    fields: dict = {}
    measure_run(backend, spec, ctx if ctx is not None else RunContext(), fields)
    return fields
