"""Nothing lost: interrupts keep finished rows and --resume completes them; concurrent writers lose
nothing; out-of-memory is a status; the largest batch that fits is found."""

import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.capacity import search
from harness.store import Store

from tests.conftest import RELIABILITY


def _fake_scenario(write_scenario, tmp_path, runs, action="ok", name="s", **options):
    return write_scenario({
        "name": name, "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120},
        "backends": ["fake"], "devices": ["cpu"],
        "sweep": {"batch": list(range(1, runs + 1))},
        "options": {"fake": {"action": action, "marker": str(tmp_path / f"{name}.marker"), **options}},
    }, name=f"{name}.yaml")


def _wait_for_marker(path, count, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(path.read_text().split()) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never reached {count} lines")


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupt_keeps_finished_rows_and_resume_completes_the_rest(tmp_path, fake_backend, write_scenario, sig, code):
    path = _fake_scenario(write_scenario, tmp_path, 5, action="sleep", seconds=0.5)
    db = tmp_path / "i.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "s.marker", 3)  # the third run has started: two finished
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "2 of 5 run(s) finished" in err
    with Store(db) as store:
        rows = store.records()
        session = store.sessions()[0]
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    assert session["state"] == "interrupted"
    assert f"--resume {session['session_id']}" in err

    done = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", session["session_id"], "--store", str(db)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "3 of 5 run(s) have no ok result" in done.stderr
    with Store(db) as store:
        rows = store.records()
    assert len(rows) == 5
    assert len({r["run_key"] for r in rows}) == 5  # each planned run once: nothing redone, nothing missing
    assert {r["session_id"] for r in rows} == {session["session_id"]}
    RELIABILITY["interrupted sessions resumed"] += 1


def test_two_concurrent_sessions_of_20_runs_leave_40_rows(tmp_path, fake_backend, write_scenario):
    db = tmp_path / "c.db"
    paths = [_fake_scenario(write_scenario, tmp_path, 20, name=f"c{i}") for i in range(2)]

    def session(path):
        return subprocess.run([sys.executable, "-m", "harness", "run", path, "--store", str(db), "-q"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(session, paths))
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    with Store(db) as store:
        rows = store.records()
        check = store._db.execute("PRAGMA integrity_check").fetchone()[0]
    assert len(rows) == 40
    assert len({r["run_id"] for r in rows}) == 40
    assert check == "ok"
    RELIABILITY["rows lost"] += 40 - len(rows)


def test_a_store_that_cannot_be_written_is_reported_before_any_run(tmp_path, fake_backend, write_scenario, harness_cli):
    path = _fake_scenario(write_scenario, tmp_path, 1)
    code, out, err = harness_cli("run", path, "--store", str(tmp_path / "no" / "such" / "dir.db"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "s.marker").exists()
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"this is not a database" * 100)
    code, out, err = harness_cli("run", path, "--store", str(bad))
    assert code == 2 and "cannot be opened" in err
    assert not (tmp_path / "s.marker").exists()


@pytest.mark.parametrize("true_limit", [1, 37, 64, 100, 1000])
def test_capacity_search_finds_the_largest_fitting_batch(true_limit):
    best, first_bad, history, error = search(lambda n: n <= true_limit, start=1, limit=65536)
    assert error is None
    assert best == true_limit and first_bad == true_limit + 1
    assert len(history) <= 2 * (true_limit.bit_length() + 1)


def test_capacity_search_stops_at_the_limit_and_on_other_failures():
    assert search(lambda n: True, start=1, limit=100)[:2] == (100, None)
    best, bad, history, error = search(lambda n: None if n > 8 else True, start=1, limit=1000)
    assert best == 8 and "other than memory" in error


def test_find_max_batch_through_real_worker_processes(tmp_path, fake_backend, write_scenario, harness_cli):
    path = write_scenario({
        "name": "cap", "workload": "resnet50_train", "params": {"batch_size": 2, "image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120},
        "backends": ["fake"], "devices": ["cpu"],
        "options": {"fake": {"action": "oom_above", "limit": 37}},
    })
    db = tmp_path / "cap.db"
    code, out, err = harness_cli("run", path, "--find-max-batch", "--store", str(db))
    assert code == 0, err
    with Store(db) as store:
        rows = store.records()
    capacity = [r for r in rows if r["metric"] == "max_batch_size"]
    probes = [r for r in rows if r.get("probe_of")]
    assert len(capacity) == 1
    assert capacity[0]["median"] == 37 and capacity[0]["params"]["batch_size"] == 37
    assert capacity[0]["checks"]["first_failing_batch_size"] == 38
    assert {p["status"] for p in probes} == {"ok", "oom"}
    assert all(p["probe_of"] == capacity[0]["run_id"] for p in probes)


def test_an_interrupted_capacity_session_resumes_the_searches_it_had_not_finished(tmp_path, fake_backend, write_scenario):
    path = write_scenario({
        "name": "cap", "workload": "resnet50_train", "params": {"batch_size": 2, "image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120},
        "backends": ["fake"], "devices": ["cpu"],
        "capacity": {"start": 2, "limit": 1024},
        "sweep": {"precision": ["fp32", "amp_bf16", "amp_fp16"]},
        "options": {"fake": {"action": "oom_above", "limit": 37, "marker": str(tmp_path / "cap.marker")}},
    })
    db = tmp_path / "cap.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "cap.marker", 13)  # the first search took 11 probes; the second is under way
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    with Store(db) as store:
        first = [r for r in store.records() if r["metric"] == "max_batch_size"]
        session = store.sessions()[0]["session_id"]
    assert [(r["params"]["precision"], r["median"]) for r in first] == [("fp32", 37.0)]

    done = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", session, "--store", str(db)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 of 3 capacity search(es) have no ok result" in done.stderr
    with Store(db) as store:
        rows = store.records()
    capacity = [r for r in rows if r["metric"] == "max_batch_size"]
    assert sorted(r["params"]["precision"] for r in capacity) == ["amp_bf16", "amp_fp16", "fp32"]  # each once
    assert all(r["status"] == "ok" and r["median"] == 37 and r["session_id"] == session for r in capacity)
    # the probes of the interrupted search stay stored (nothing measured is lost), attached to no record
    orphans = [r for r in rows if r.get("probe_of") and r["probe_of"] not in {c["run_id"] for c in capacity}]
    assert orphans and all(r["params"]["precision"] == "amp_bf16" for r in orphans)
    RELIABILITY["interrupted sessions resumed"] += 1


def test_a_real_torch_run_out_of_memory_is_oom_and_the_next_run_is_ok(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("torch")
    path = write_scenario({
        "name": "oom", "workload": "resnet50_train", "params": {"image_size": 64, "memory_format": "channels_last"},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 300},
        "backends": ["torch"], "devices": ["cpu"],
        "sweep": {"batch_size": [512, 2]},
    })
    db = tmp_path / "oom.db"
    code, out, err = harness_cli("run", path, "--store", str(db), "--memory-limit", "1.5GiB")
    assert code == 1, err  # one run did not succeed
    with Store(db) as store:
        first, second = store.records()
    assert first["params"]["batch_size"] == 512 and first["status"] == "oom", first.get("error")
    assert "allocate" in first["error"]
    assert second["params"]["batch_size"] == 2 and second["status"] == "ok", second.get("error")
    RELIABILITY["out-of-memory runs survived"] += 1


def test_find_max_batch_with_real_torch_under_a_memory_limit_brackets_the_limit(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("torch")
    path = write_scenario({
        "name": "cap-torch", "workload": "resnet50_train", "params": {"image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 300},
        "backends": ["torch"], "devices": ["cpu"],
        "capacity": {"start": 16, "limit": 4096, "resolution": 32},
    })
    db = tmp_path / "cap.db"
    code, out, err = harness_cli("run", path, "--store", str(db), "--memory-limit", "1.5GiB")
    assert code == 0, err
    with Store(db) as store:
        rows = store.records()
    capacity = next(r for r in rows if r["metric"] == "max_batch_size")
    probes = {r["params"]["batch_size"]: r["status"] for r in rows if r.get("probe_of")}
    best, bad = int(capacity["median"]), capacity["checks"]["first_failing_batch_size"]
    assert probes[best] == "ok" and probes[bad] == "oom"
    assert 0 < bad - best <= 32  # within one bisection step of the limit
    assert all(status == "ok" for n, status in probes.items() if n <= best)
    assert all(status == "oom" for n, status in probes.items() if n >= bad)
