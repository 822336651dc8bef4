"""Specs as the worker hands them to a backend, built by the same RunSpec the planner uses; facts of the
installed frameworks that tests depend on."""

import functools
import importlib.metadata
import subprocess
import sys

from harness.session.plan import RunSpec
from harness.workloads import get_workload


def backend_spec(backend: str, workload: str, params: dict, measure: dict, *, device: str = "cpu", seed: int = 0,
                 options: dict | None = None) -> RunSpec:
    """A spec with validated, defaulted params (docs/architecture.md describes its keys); `probe: true` among the
    measure settings makes it a capacity probe's."""
    measure = dict(measure)
    probe = bool(measure.pop("probe", False))
    return RunSpec(
        run_id="test-run",
        session_id="test-session",
        run_key="test-key",
        scenario="test",
        workload=workload,
        backend=backend,
        device=device,
        params=get_workload(workload).validate(params).model_dump(),
        measure=measure,
        seed=seed,
        options=dict(options or {}),
        probe=probe,
    )


def run_backend(backend, spec: RunSpec, ctx=None) -> dict:
    """Run a spec through the core's half of the seam in this process, as the worker does; the record
    fields measured. Raises what the backend raised (Unsupported, an out-of-memory error...)."""
    from harness.results.record import utc_now
    from harness.seam.backend import RunContext
    from harness.worker.execute import measure_run
    from harness.worker.outcome import WorkerResult

    result = WorkerResult(started_at=utc_now())
    measure_run(backend, spec, ctx if ctx is not None else RunContext(), result)
    return result.measured_fields()


def run_handloop(script: str, args: list[str], *, env: dict | None = None, timeout: float = 600) -> dict:
    """Run a hand-written benchmark loop (benchmarks/SCRIPT) in a fresh Python, check that it imported no
    part of harness, and return the JSON report it printed last."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    code = (
        "import runpy, sys; sys.argv = sys.argv[1:];"
        "runpy.run_path(sys.argv[0], run_name='__main__');"
        "assert not any(m == 'harness' or m.startswith('harness.') for m in sys.modules), 'harness imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(root / "benchmarks" / script), *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@functools.lru_cache(maxsize=None)
def tensorflow_uses_onednn_on_the_cpu() -> bool:
    """Whether TensorFlow runs its CPU kernels through oneDNN here (its default on x86 CPUs with AVX-512), asked in
    a process of its own so that the caller's process never imports TensorFlow. Without oneDNN, TensorFlow keeps no
    CPU allocator statistics and has no NCHW convolution on the CPU."""
    code = ("import tensorflow as tf; tf.constant([1.0]) * 2.0\n"
            "try:\n    tf.config.experimental.get_memory_info('CPU:0'); print('yes')\n"
            "except ValueError:\n    print('no')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    return out.stdout.strip().splitlines()[-1:] == ["yes"]


def tensorflow_version() -> tuple[int, int]:
    """The installed TensorFlow's (major, minor), read from its distribution without importing it; (0, 0) if none."""
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            major, minor = importlib.metadata.version(name).split(".")[:2]
            return int(major), int(minor)
        except importlib.metadata.PackageNotFoundError:
            continue
    return 0, 0


def planned(run_key: str, replicate: int = 0, **fields):
    """A session's planned run of configuration `run_key` (its plan's entry), with a minimal spec."""
    from harness.results.sessions import PlanEntry

    spec = RunSpec(run_id=f"{run_key}-{replicate}", session_id="s", run_key=run_key, scenario="t", workload="gemm",
                   backend="torch", device="cpu", params={"size": 8}, measure={}, seed=0, replicate=replicate)
    return PlanEntry(spec, **fields)
