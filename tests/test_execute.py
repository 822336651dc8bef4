"""The worker's execute (harness.worker.execute) in this process, on the CPU, with the fake backend: a typed
RunSpec in, the worker's part of the record out, and a status for every way a run can end."""

import json

import pytest

from harness.seam.runspec import RunSpec
from harness.worker.execute import execute
from harness.worker.main import main
from harness.worker.outcome import WorkerResult
from harness.workloads import get_workload

TINY = {"warmup": 0, "steps": 2, "repeats": 3}
#: what every result file holds, however the run ended
ALWAYS = {"started_at", "phases_s", "warnings", "host_peak_rss_bytes", "env", "duration_s", "status"}
#: what a run that was timed adds
FIGURES = {"peak_allocated_bytes", "median", "iqr", "ci_low", "ci_high", "cv", "api", "samples", "step_time_s",
           "first_step_s", "checks", "timing", "tflops", "telemetry", "energy_j", "avg_power_w", "device_used_bytes"}
IDENTITY = {"device", "device_name", "framework_version"}


def spec(action: str = "ok", backend: str = "fake", **params) -> RunSpec:
    return RunSpec(run_id="r1", session_id="s1", run_key="k1", scenario="t", workload="gemm", backend=backend,
                   device="cpu", params=get_workload("gemm").validate({"size": 8, **params}).model_dump(),
                   measure=dict(TINY), seed=0, options={"action": action})


def test_an_ok_run_is_typed_and_its_result_file_holds_the_measured_fields(fake_backend):
    result = execute(spec())
    assert isinstance(result, WorkerResult) and result.status == "ok" and result.error is None
    assert result.identity == {"device": "cpu", "device_name": "fake cpu", "framework_version": result.identity[
        "framework_version"]}
    figures = result.measured.figures
    assert len(figures.samples) == 3 and figures.median > 0 and figures.tflops == figures.median
    assert figures.api == {"precision": "numpy.matmul", "sync": "time.perf_counter"}
    assert figures.checks.to_dict() == {"correct": True} and figures.timing.steps_per_block == 2
    assert result.env["framework"] == {"fake": True} and result.duration_s > 0
    assert set(result.phases_s) == {"open_device", "prepare", "steps", "after"}
    row = result.to_dict()
    assert set(row) == ALWAYS | FIGURES | IDENTITY
    assert "pct_of_peak" not in row  # the CPU has no datasheet peak to miss
    assert json.loads(json.dumps(row)) == row


@pytest.mark.parametrize("action, status, evidence", [
    ("raise", "failed", None),
    ("oom", "oom", "MemoryError: planted: cannot allocate"),
    ("raise_oom_message", "oom", "planted allocation failure"),
    ("unsupported", "unsupported", None),
])
def test_a_run_that_raises_gets_the_status_its_error_means(fake_backend, action, status, evidence):
    result = execute(spec(action))
    assert result.status == status and result.error
    assert result.oom_evidence == evidence
    assert (result.traceback is not None) == (status == "failed")
    assert result.measured is None
    assert result.identity["device"] == "cpu"  # the device was open: its identity stays
    row = result.to_dict()
    assert set(row) == ALWAYS | IDENTITY | {"error"} | ({"oom_evidence"} if evidence else set()) | (
        {"traceback"} if status == "failed" else set())


def test_an_allocation_failure_under_another_name_says_why_it_counts_as_out_of_memory(fake_backend):
    result = execute(spec("raise_oom_message"))
    assert result.error.startswith("RuntimeError: planted allocation failure")
    assert result.error.endswith("[counted as out-of-memory: planted allocation failure]")


def test_an_unknown_backend_is_a_failed_run_not_a_crash(fake_backend):
    result = execute(spec(backend="nope"))
    assert result.status == "failed" and "KeyError" in result.error
    assert result.identity == {} and result.phases_s is None
    assert set(result.to_dict()) == ALWAYS - {"phases_s"} | {"error", "traceback"}


def test_a_combination_refused_once_the_device_is_known_is_unsupported(fake_backend, monkeypatch):
    from tests.fake_backend import FakeBackend

    monkeypatch.setattr(FakeBackend, "unsupported_reason", lambda self, *a, **k: "planted: not on this device")
    result = execute(spec())
    assert result.status == "unsupported" and result.error == "Unsupported: planted: not on this device"


def test_the_worker_reads_the_spec_file_and_writes_the_result_file(fake_backend, tmp_path):
    spec_path, result_path = tmp_path / "spec.json", tmp_path / "result.json"
    spec_path.write_text(json.dumps(spec().to_dict()), encoding="utf-8")
    assert main([str(spec_path), str(result_path)]) == 0
    row = json.loads(result_path.read_text(encoding="utf-8"))
    assert row["status"] == "ok" and set(row) == ALWAYS | FIGURES | IDENTITY
    assert "run_id" not in row  # the runner's fields stay the runner's
