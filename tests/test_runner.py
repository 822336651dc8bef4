"""The runner: one process per run; a raise, a hard exit, a signal, a hang each become a status."""

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from harness.results.store import open_store
from harness.session.plan import RunSpec, run_key
from harness.session.runner import Runner
from harness.timing.settings import Measure
from tests.conftest import RELIABILITY

#: One worker process per configuration (measure.processes, where this harness has it): these tests
#: count runs, and replicates are not what they test.
ONE_PROCESS = {"processes": 1} if "processes" in Measure.model_fields else {}


def spec(action="ok", timeout_s=120.0, **options) -> RunSpec:
    params = {"size": 64, "m": None, "n": None, "k": None, "batch": 1, "precision": "fp32", "execution": "eager"}
    return RunSpec(
        run_id=f"r-{action}-{time.monotonic_ns()}",
        session_id="s1",
        run_key=run_key("t", "gemm", "fake", "cpu", {**params, "action": action}),
        scenario="t",
        workload="gemm",
        backend="fake",
        device="cpu",
        params=params,
        measure={"warmup": 1, "steps": 3, "repeats": 3, "timeout_s": timeout_s},
        seed=0,
        options={"action": action, **options},
    )


@pytest.fixture
def runner(tmp_path, fake_backend):
    store = open_store(tmp_path / "r.db")
    yield Runner(store)
    store.close()


def test_an_ok_run_is_a_complete_record(runner):
    record = runner.execute(spec("ok"))
    assert record.status == "ok", record.error
    assert len(record.samples) == 3
    assert record.median > 0 and record.ci_low <= record.median <= record.ci_high
    assert record.metric == "tflops" and record.unit == "TFLOP/s"
    assert record.tflops == record.median
    assert record.host_peak_rss_bytes > 10_000_000
    assert record.env.python and record.env.packages["numpy"]
    assert record.pct_of_peak is None  # a fake device has no datasheet: null, never zero


def test_a_record_says_where_its_wall_time_went(runner):
    # a probe that costs a minute, most of it outside its two steps, is answered by these phases
    record = runner.execute(spec("sleep", seconds=0.5))
    assert record.status == "ok", record.error
    phases = record.phases_s.to_dict()
    assert set(phases) == {"open_device", "prepare", "steps", "after", "process"}
    assert phases["prepare"] >= 0.5 > phases["steps"]  # the fake sleeps in prepare, not in its steps
    assert all(v >= 0 for v in phases.values())
    assert sum(phases.values()) == pytest.approx(record.duration_s, abs=0.05)


def test_a_failed_run_keeps_the_phases_it_reached(runner):
    record = runner.execute(spec("raise"))
    assert record.status == "failed"
    assert set(record.phases_s.to_dict()) == {"open_device", "prepare", "process"}  # it failed preparing


@pytest.mark.parametrize(
    "action, status, text",
    [
        ("raise", "failed", "planted failure"),
        ("exit", "failed", "exited with code 3"),
        ("kill", "failed", "SIGKILL"),
        ("oom", "oom", "cannot allocate"),
    ],
)
def test_a_broken_worker_gets_its_status_and_the_next_run_succeeds(runner, action, status, text):
    outcome = runner.run([spec(action), spec("ok")])
    first, second = outcome.records
    assert first.status == status
    assert text in first.error
    assert second.status == "ok"
    # the environment of every record, whether or not its worker wrote one
    assert first.env.python and first.env.packages["numpy"]
    stored = {r["run_id"]: r["status"] for r in runner.store.records()}
    assert stored == {first.run_id: status, second.run_id: "ok"}
    RELIABILITY[f"broken workers survived ({action} -> {status}), next run ok"] += 1


def test_a_hanging_worker_times_out_and_is_stopped(runner):
    started = time.monotonic()
    outcome = runner.run([spec("hang", timeout_s=3), spec("ok")])
    assert time.monotonic() - started < 60
    assert [r.status for r in outcome.records] == ["timeout", "ok"]
    assert "3 s" in outcome.records[0].error
    stopped = outcome.records[0]
    assert stopped.env.python and stopped.env.captured_by == "runner"  # filled by the parent
    assert stopped.median is None and stopped.host_peak_rss_bytes is None
    RELIABILITY["broken workers survived (hang -> timeout), next run ok"] += 1


def test_a_worker_leaves_as_soon_as_its_result_is_written(runner):
    # a non-daemon thread stands in for a teardown that never ends (torch 2.0.1 after an OOM
    # mid-backward deadlocks in a thread-local destructor); the worker must not wait for it
    started = time.monotonic()
    record = runner.execute(spec("hang_at_exit", timeout_s=20))
    assert record.status == "ok", record.error
    assert not any("had not exited" in w for w in record.warnings or [])
    assert time.monotonic() - started < 20


def test_a_result_written_before_a_hang_is_kept_with_a_warning(runner):
    record = runner.execute(spec("write_then_hang", timeout_s=3))
    assert record.status == "ok" and record.samples == (1.0, 1.0, 1.0)
    assert any("had not exited after 3 s" in w for w in record.warnings)


def test_a_backend_that_is_not_registered_is_unsupported_without_a_worker(runner):
    record = runner.execute(dataclasses.replace(spec(), backend="nonexistent"))
    assert record.status == "unsupported" and "nonexistent" in record.error
    assert record.duration_s == 0.0
    assert record.env.python


def test_resnet_training_on_one_image_is_unsupported_on_torch_before_any_worker(tmp_path, write_scenario, harness_cli):
    # torch's BatchNorm cannot train on a batch of one: known at plan time
    from harness.seam.backend import available_backends

    if not available_backends()["torch"].installed():
        pytest.skip("torch is not installed")
    path = write_scenario({"name": "one", "workload": "resnet50_train", "params": {"batch_size": 1, "image_size": 32},
                           "measure": {"warmup": 0, "steps": 1, "repeats": 1, **ONE_PROCESS},
                           "backends": ["torch"], "devices": ["cpu"]})
    started = time.monotonic()
    code, out, err = harness_cli("run", path, "--store", "one.db")
    assert code == 3, err  # an answer, not a failure, but no run measured anything: exit 3
    assert time.monotonic() - started < 60
    with open_store(tmp_path / "one.db") as store:
        (record,) = store.records()
    assert record["status"] == "unsupported" and record["duration_s"] == 0.0  # no worker was started
    assert "batch_size 2 or more" in record["error"] and "per channel" in record["error"]
    assert "unsupported" in out


def test_a_worker_can_work_under_the_smallest_memory_limit_accepted(runner):
    # MIN_MEMORY_LIMIT is measured: a real torch worker imports and multiplies under it
    from harness.session.limits import MIN_MEMORY_LIMIT

    if not runner.backends["torch"].installed():
        pytest.skip("torch is not installed")
    at_floor = Runner(runner.store, memory_limit_bytes=MIN_MEMORY_LIMIT)
    record = at_floor.execute(dataclasses.replace(spec(), backend="torch", options={}))
    assert record.status == "ok", (record.error, record.extra.get("log_tail"))
    assert record.host_peak_rss_bytes < MIN_MEMORY_LIMIT


def test_an_unmapped_technique_value_is_unsupported(runner):
    record = runner.execute(dataclasses.replace(spec(), workload="resnet50_train", params={"recompute": "blocks"}))
    # the fake backend declares no technique values for resnet50_train: nothing to reject, so it runs
    assert record.status in ("ok", "failed")
    params = dict(spec().params, execution="compiled")
    record = runner.execute(dataclasses.replace(spec(), params={**params, "precision": "fp64"}))
    assert record.status == "unsupported" and "precision='fp64'" in record.error


def test_the_store_keeps_every_committed_row_after_the_session_is_killed(tmp_path, fake_backend, write_scenario):
    path = write_scenario({
        "name": "killme", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 3, "timeout_s": 600, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"],
        "sweep": {"batch": [1, 2, 3, 4, 5, 6]},
        "options": {"fake": {"action": "sleep", "seconds": 0.3, "marker": str(tmp_path / "marker")}},
    })
    db = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db), "-q"],
                            cwd=tmp_path, env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        marker = tmp_path / "marker"
        if marker.exists() and len(marker.read_text().split()) >= 4:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the store file alone, without its -wal, holds every committed row too (a GPU machine gave back the
    # .db files of a killed session without their logs, and the rows in the logs were gone)
    alone = tmp_path / "alone.db"
    shutil.copyfile(db, alone)
    with open_store(alone, readonly=True) as store:
        assert len(store.records()) >= 3 and store.sessions()
    with open_store(db, readonly=True) as store:  # reading changes nothing: still `running`
        assert store.sessions()[0].state == "running"
    with open_store(db) as store:  # opened for writing: its process is gone, so it is marked
        rows = store.records()
        (session,) = store.sessions()
        assert store.abandoned == [session.session_id]
    assert session.state == "abandoned"  # never left `running` by a process that has ended
    assert 3 <= len(rows) < 6
    assert all(r["status"] == "ok" and r["samples"] for r in rows)


def _tmpdir_full(monkeypatch):
    """shutil.disk_usage saying a run's folder (harness-run-*) has no byte free, as a full TMPDIR would."""
    real = shutil.disk_usage

    def usage(path):
        return real(path)._replace(free=0) if "harness-run-" in str(path) else real(path)

    monkeypatch.setattr(shutil, "disk_usage", usage)


def test_a_worker_that_dies_on_a_full_tmpdir_is_said_to_have_met_a_full_disk(runner, monkeypatch):
    _tmpdir_full(monkeypatch)
    record = runner.execute(spec("exit"))
    # before: "worker exited with code 3 before writing a result", and nothing of the disk
    assert record.status == "failed" and "worker exited with code 3" in record.error
    assert "is full (0 bytes free): point TMPDIR at a folder with space" in record.error
    RELIABILITY["full TMPDIR said as such"] += 1


def test_a_run_whose_spec_cannot_be_written_is_a_failed_record_not_a_traceback(runner, monkeypatch):
    import errno

    from harness.session import runner as runner_module

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    _tmpdir_full(monkeypatch)
    monkeypatch.setattr(runner_module, "write_json_atomic", full)
    outcome = runner.run([spec("ok"), spec("ok")])  # before: OSError 28 from runner.py, the session ended
    assert [r.status for r in outcome.records] == ["failed", "failed"]
    assert all("is full (0 bytes free)" in r.error for r in outcome.records)
