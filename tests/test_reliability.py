"""Nothing lost: interrupts keep finished rows and --resume completes them, with the session's own
settings; concurrent writers lose nothing; a damaged store is refused untouched; a result the store
cannot take (a full disk, a damaged page) is kept in a side file and taken back in; kill -9 and
SIGINT at random moments lose no row; out-of-memory is a status; the largest batch that fits is found."""

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.results.record import Result
from harness.results.store import SQLiteStore, open_store
from harness.results.store.sidefiles import read_side_file
from harness.session.capacity_answer import fits
from harness.session.capacity_search import search
from harness.session.resume import remaining_runs, settled_results, work_left
from harness.timing.settings import Measure
from tests.conftest import RELIABILITY
from tests.specs import planned

#: One worker process per configuration (measure.processes, where this harness has it): these tests
#: count runs, and replicates are not what they test.
ONE_PROCESS = {"processes": 1} if "processes" in Measure.model_fields else {}


def _fake_scenario(write_scenario, tmp_path, runs, action="ok", name="s", **options):
    return write_scenario({
        "name": name, "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, **ONE_PROCESS},
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


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_an_interrupt_keeps_finished_rows_and_resume_completes_the_rest(tmp_path, fake_backend, write_scenario, sig, code):
    path = _fake_scenario(write_scenario, tmp_path, 5, action="sleep", seconds=0.5)
    db = tmp_path / "i.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "s.marker", 3)  # the third run has started: two finished
    with open_store(db, readonly=True) as store:
        running = store.sessions()[0]
    assert running.state == "running"
    # resuming a session whose process still runs would run its runs twice: refused, nothing written
    refused = CliRunner().invoke(main, ["run", "--resume", running.session_id, "--store", str(db)])
    assert refused.exit_code == 2 and "still running" in refused.output, refused.output
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "2 of 5 run(s) finished" in err
    with open_store(db) as store:
        rows = store.records()
        session = store.sessions()[0]
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    assert session.state == "interrupted"
    assert f"--resume {session.session_id}" in err

    done = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", session.session_id, "--store", str(db)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "3 of 5 run(s) have no ok result" in done.stderr
    with open_store(db) as store:
        rows = store.records()
    assert len(rows) == 5
    assert len({r["run_key"] for r in rows}) == 5  # each planned run once: nothing redone, nothing missing
    assert {r["session_id"] for r in rows} == {session.session_id}
    RELIABILITY["interrupted sessions resumed"] += 1


def _session_with_runs_left(tmp_path, write_scenario, runs, kept, **options):
    """A finished session of `runs` fake runs whose store then lost all but `kept` of its rows: (store, session id)."""
    db = tmp_path / "r.db"
    done = CliRunner().invoke(main, ["run", _fake_scenario(write_scenario, tmp_path, runs, **options), "--store",
                                     str(db), "-q"])
    assert done.exit_code == 0, done.output
    with sqlite3.connect(db) as raw:
        session_id = raw.execute("SELECT session_id FROM sessions").fetchone()[0]
        raw.execute("DELETE FROM results WHERE rowid NOT IN (SELECT rowid FROM results ORDER BY rowid LIMIT ?)",
                    (kept,))
    return db, session_id


def test_a_session_claimed_by_another_resume_after_it_was_read_is_refused_naming_the_owner(
        tmp_path, fake_backend, write_scenario):
    from harness.errors import StoreError
    from harness.results.store.liveness import process_owner
    from harness.session.app import SessionRequest, prepare_session, run_session

    db, session_id = _session_with_runs_left(tmp_path, write_scenario, 3, 1)
    late = prepare_session(SessionRequest(resume=session_id, store_path=str(db)))  # read: 2 of 3 runs left
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open_store(db) as store:  # another `--resume` claims it between this one's read and its claim
            store.reopen_session(session_id)
            store._execute("UPDATE sessions SET owner = ? WHERE session_id = ?",
                           (json.dumps(process_owner(other.pid)), session_id))
        with pytest.raises(StoreError) as refused:
            run_session(late)
    finally:
        other.kill()
        other.wait()
    assert f"claimed by pid {other.pid}" in str(refused.value) and refused.value.field == "--resume"
    with open_store(db, readonly=True) as store:
        assert len(store.records()) == 1  # nothing run twice, nothing run at all
        assert store.session(session_id).owner.pid == other.pid


def test_resumes_started_at_once_run_each_planned_run_once(tmp_path, fake_backend, write_scenario):
    db, session_id = _session_with_runs_left(tmp_path, write_scenario, 4, 1, action="sleep", seconds=0.3)
    resumes = [subprocess.Popen([sys.executable, "-m", "harness", "run", "--resume", session_id, "--store", str(db),
                                 "-q"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    ended = [(p.wait(timeout=180), p.stderr.read()) for p in resumes]
    for p in resumes:
        p.stdout.close()
        p.stderr.close()
    assert {code for code, _ in ended} <= {0, 2} and 0 in {code for code, _ in ended}, ended
    for code, err in ended:
        if code == 2:
            assert "Traceback" not in err and re.search(r"(claimed by |still running \()pid \d+", err), err
    with open_store(db, readonly=True) as store:
        rows = [r for r in store.records() if r["status"] == "ok"]
    # before: each resume read "3 of 4 left" and ran them: up to 10 ok rows for 4 planned runs
    assert len(rows) == 4 and len({r["run_key"] for r in rows}) == 4, [r["run_key"] for r in rows]
    RELIABILITY["resumes at once, each planned run once"] += 1


def _lock_free(path) -> bool:
    import fcntl

    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
        return True


def _pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's (prctl)")
def test_a_worker_dies_with_its_parent_and_releases_the_host_timing_lock(tmp_path, fake_backend, write_scenario):
    lock = str(tmp_path / "timing.lock")  # its own: another test's worker may hold the suite's
    path = _fake_scenario(write_scenario, tmp_path, 1, action="slow_steps", seconds=5)  # 15 s in the lock
    parent = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(tmp_path / "k.db"), "-q"],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "HARNESS_HOST_LOCK": lock})
    try:
        _wait_for_marker(tmp_path / "s.marker", 1)
        worker = int((tmp_path / "s.marker").read_text().split()[0])
        deadline = time.monotonic() + 60
        while (not os.path.exists(lock) or _lock_free(lock)) and time.monotonic() < deadline:  # in its timed steps
            time.sleep(0.05)
        assert not _lock_free(lock)
    finally:
        parent.kill()  # SIGKILL: no handler of the parent's runs
        parent.wait()
    deadline = time.monotonic() + 10  # a loaded machine may take a moment to end it and close its files
    while not (_pid_gone(worker) and _lock_free(lock)) and time.monotonic() < deadline:
        time.sleep(0.05)
    # before: the worker ran on (17 s in the hostile pass), holding the lock every other session waits for
    assert _pid_gone(worker) and _lock_free(lock)
    RELIABILITY["workers ended with their killed parent"] += 1


def test_two_concurrent_sessions_of_20_runs_leave_40_rows(tmp_path, fake_backend, write_scenario):
    db = tmp_path / "c.db"
    paths = [_fake_scenario(write_scenario, tmp_path, 20, name=f"c{i}") for i in range(2)]

    def session(path):
        return subprocess.run([sys.executable, "-m", "harness", "run", path, "--store", str(db), "-q"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(session, paths))
    assert [r.returncode for r in results] == [0, 0], [r.stderr for r in results]
    with open_store(db) as store:
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
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"],
        "options": {"fake": {"action": "oom_above", "limit": 37}},
    })
    db = tmp_path / "cap.db"
    code, out, err = harness_cli("run", path, "--find-max-batch", "--store", str(db))
    assert code == 0, err
    with open_store(db) as store:
        rows = store.records()
    capacity = [r for r in rows if r["metric"] == "max_batch_size"]
    probes = [r for r in rows if r.get("probe_of")]
    assert len(capacity) == 1
    assert capacity[0]["median"] == 37 and capacity[0]["params"]["batch_size"] == 37
    assert capacity[0]["checks"]["first_failing_batch_size"] == 38
    assert {p["status"] for p in probes} == {"ok", "oom"}
    assert all(p["probe_of"] == capacity[0]["run_id"] for p in probes)
    # on the CPU without --memory-limit a worker importing beside a probe would take the host memory it
    # measures: no probe's worker starts ahead there
    assert not any("imported_ahead" in p["phases_s"] for p in probes)


def test_a_capacity_search_whose_start_does_not_fit_says_so_and_probes_nothing_below_it(
        tmp_path, fake_backend, write_scenario, harness_cli):
    # below the start may be a batch the backend refuses (1 with BatchNorm): never probed
    best, bad, history, error = search(lambda n: None if n < 8 else False, start=8, limit=1000)
    assert (best, bad, history, error) == (0, 8, [(8, False)], None)
    path = write_scenario({
        "name": "cap", "workload": "resnet50_train", "params": {"batch_size": 2, "image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"], "capacity": {"start": 16},
        "options": {"fake": {"action": "oom_above", "limit": 5}},
    })
    db = tmp_path / "cap.db"
    code, out, err = harness_cli("run", path, "--find-max-batch", "--store", str(db))
    assert code == 1, err
    with open_store(db) as store:
        rows = store.records()
    (capacity,) = [r for r in rows if r["metric"] == "max_batch_size"]
    assert [r["params"]["batch_size"] for r in rows if r.get("probe_of")] == [16]
    assert capacity["error"].startswith("nothing fits at the start: batch_size=16 does not fit (oom")
    assert "other than memory" not in capacity["error"]
    RELIABILITY["capacity searches whose start does not fit, said so"] += 1


def test_the_probe_worker_started_ahead_is_stopped_after_the_search(tmp_path, fake_backend):
    from harness.session.capacity import find_max_batch
    from harness.session.plan import RunSpec
    from harness.session.runner import Runner

    spec = RunSpec(run_id="r", session_id="s", run_key="k", scenario="cap", workload="resnet50_train", backend="fake",
                   device="cpu", params={"batch_size": 2, "image_size": 32}, seed=0,
                   measure={"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120},
                   options={"action": "oom_above", "limit": 9})
    with open_store(tmp_path / "a.db") as store:
        runner = Runner(store, memory_limit_bytes=2**31)  # each worker its own limit: starting ahead is harmless
        started = []
        start = runner.ahead.start
        runner.ahead.start = lambda *a: (start(*a), started.append(runner.ahead.pool[-1].proc))
        (record,) = find_max_batch(runner, [spec], start=2, limit=64, resolution=1).records
    assert record.median == 9
    assert len(started) >= 3 and not runner.ahead.pool
    assert all(proc.poll() is not None for proc in started)  # the last, never used, was stopped too
    probes = sorted((r for r in store_records(tmp_path / "a.db") if r.get("probe_of")), key=lambda r: r["started_at"])
    assert "imported_ahead" not in probes[0]["phases_s"]  # the first probe's worker started alone
    assert all("imported_ahead" in p["phases_s"] for p in probes[1:])  # each later one while the one before ran


def store_records(path):
    with open_store(path) as store:
        return store.records()


def test_a_worker_started_ahead_leaves_when_its_runner_is_gone(tmp_path, fake_backend):
    # the runner killed (SIGKILL: no clean-up) must not leave a worker waiting for a run forever
    parent = subprocess.run([sys.executable, "-c", (
        "import os, subprocess, sys; p = subprocess.Popen([sys.executable, '-m', 'harness.worker', '--ahead', 'fake', "
        f"{str(tmp_path)!r}, str(os.getpid())], start_new_session=True); print(p.pid)")],
        capture_output=True, text=True, check=True)
    pid = int(parent.stdout.strip())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the worker started ahead outlived its runner")
    assert not (tmp_path / "result.json").exists()


def test_an_interrupted_capacity_session_resumes_the_searches_it_had_not_finished(tmp_path, fake_backend, write_scenario):
    path = write_scenario({
        "name": "cap", "workload": "resnet50_train", "params": {"batch_size": 2, "image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120, **ONE_PROCESS},
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
    with open_store(db) as store:
        first = [r for r in store.records() if r["metric"] == "max_batch_size"]
        session = store.sessions()[0].session_id
    assert [r["median"] for r in first] == [37.0]  # one search finished (the plan's order is shuffled)
    # the report counts searches, as --resume does, not the probes that happen to share a planned run's key
    report = subprocess.run([sys.executable, "-m", "harness", "report", "--store", str(db), "-o", str(tmp_path / "rep")],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert (f"Session {session} ended interrupted: 2 of its 3 planned capacity search(es) have no ok result"
            in (tmp_path / "rep" / "report.md").read_text(encoding="utf-8"))

    done = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", session, "--store", str(db)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "2 of 3 capacity search(es) have no ok result" in done.stderr
    with open_store(db) as store:
        rows = store.records()
    capacity = [r for r in rows if r["metric"] == "max_batch_size"]
    assert sorted(r["params"]["precision"] for r in capacity) == ["amp_bf16", "amp_fp16", "fp32"]  # each once
    assert all(r["status"] == "ok" and r["median"] == 37 and r["session_id"] == session for r in capacity)
    # the probes of the interrupted search stay stored (nothing measured is lost), attached to no record
    orphans = [r for r in rows if r.get("probe_of") and r["probe_of"] not in {c["run_id"] for c in capacity}]
    interrupted = {r["params"]["precision"] for r in orphans}
    assert len(interrupted) == 1 and interrupted != {first[0]["params"]["precision"]}
    RELIABILITY["interrupted sessions resumed"] += 1


def test_a_real_torch_run_out_of_memory_is_oom_and_the_next_run_is_ok(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("torch")
    path = write_scenario({
        "name": "oom", "workload": "resnet50_train", "params": {"image_size": 64, "memory_format": "channels_last"},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 300, **ONE_PROCESS},
        "backends": ["torch"], "devices": ["cpu"],
        "sweep": {"batch_size": [512, 2]},
    })
    db = tmp_path / "oom.db"
    code, out, err = harness_cli("run", path, "--store", str(db), "--memory-limit", "1.5GiB")
    assert code == 1, err  # one run did not succeed
    with open_store(db) as store:
        first, second = store.records()
    assert first["params"]["batch_size"] == 512 and first["status"] == "oom", first.get("error")
    assert "allocate" in first["error"]
    assert second["params"]["batch_size"] == 2 and second["status"] == "ok", second.get("error")
    RELIABILITY["out-of-memory runs survived"] += 1


def test_find_max_batch_with_real_torch_under_a_memory_limit_brackets_the_limit(tmp_path, write_scenario, harness_cli):
    pytest.importorskip("torch")
    path = write_scenario({
        "name": "cap-torch", "workload": "resnet50_train", "params": {"image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 300, **ONE_PROCESS},
        "backends": ["torch"], "devices": ["cpu"],
        # two steps a probe: this is the search against a real allocator's limit, not fragmentation over steps
        "capacity": {"start": 16, "limit": 4096, "resolution": 32, "steps": 2},
    })
    db = tmp_path / "cap.db"
    code, out, err = harness_cli("run", path, "--store", str(db), "--memory-limit", "1.5GiB")
    assert code == 0, err
    with open_store(db) as store:
        rows = store.records()
    capacity = next(r for r in rows if r["metric"] == "max_batch_size")
    probes = {r["params"]["batch_size"]: r["status"] for r in rows if r.get("probe_of")}
    # what a failing assertion shows: each probe's status and the end of its error
    why = {r["params"]["batch_size"]: (r["status"], (r.get("error") or "")[-300:]) for r in rows if r.get("probe_of")}
    best, bad = int(capacity["median"]), capacity["checks"]["first_failing_batch_size"]
    # the first probe past the limit runs out of memory; on a loaded 2-core machine it may instead die under the
    # limit (a signal), which the search counts as not fitting as well
    assert probes[best] == "ok" and probes[bad] in ("oom", "failed"), why
    assert 0 < bad - best <= 32  # within one bisection step of the limit
    assert all(status == "ok" for n, status in probes.items() if n <= best)
    # every larger probe did not fit: out of memory as a rule; on a loaded 2-core machine a larger probe may instead
    # time out twice or die by a signal under the limit, which the search counts as not fitting (and says so)
    larger = [Result.from_dict(r) for r in rows if r.get("probe_of") and r["params"]["batch_size"] > bad]
    assert all(fits(r, smaller_fit=True, host_limit=True) is False for r in larger), why
    assert capacity["checks"]["steps_trained"] == 2
    # a probe reads no batch back to hash it (seconds at the batches probes reach on a GPU)
    assert all((r.get("checks") or {}).get("inputs_fingerprint") is None for r in rows if r.get("probe_of"))


# --------------------------------------------------------------------------- resume counts runs
def _ok(db):
    with open_store(db) as store:
        return [r for r in store.records() if r["status"] == "ok"]


def test_resume_counts_planned_runs_not_configurations(tmp_path, fake_backend, write_scenario):
    path = write_scenario({
        "name": "rep", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"size": [64, 64, 64, 64]},
        "options": {"fake": {"action": "sleep", "seconds": 0.5, "marker": str(tmp_path / "rep.marker")}},
    })
    db = tmp_path / "rep.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "rep.marker", 2)  # the second run has started: one finished
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "1 of 4 run(s) finished" in err
    resume = re.search(r"finish with: (harness run --resume \S+ --store \S+)$", err.strip(), re.M).group(1)
    done = subprocess.run([sys.executable, "-m", "harness", *resume.split()[1:]],  # the printed command, as printed
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "3 of 4 run(s) have no ok result" in done.stderr
    rows = _ok(db)
    assert len(rows) == 4 and len({r["run_key"] for r in rows}) == 1  # the same configuration, 4 times
    with open_store(db) as store:
        assert store.sessions()[0].state == "finished"
    RELIABILITY["interrupted sessions resumed"] += 1


def test_resume_takes_an_unsupported_answer_as_given_but_not_a_missing_framework(tmp_path, fake_backend, write_scenario):
    # an interrupted session's unsupported runs are not decided again (each resume used to add a record for each of
    # them); one recorded as unsupported for a framework not installed where it ran is run again
    path = _fake_scenario(write_scenario, tmp_path, 3, action="unsupported")
    db = tmp_path / "u.db"
    first = CliRunner().invoke(main, ["run", path, "--store", str(db), "-q"])
    assert first.exit_code != 2, first.output
    with open_store(db) as store:
        sid = store.sessions()[0].session_id
        plan = store.session(sid)
        assert [r["status"] for r in store.records()] == ["unsupported"] * 3
        assert work_left(plan, settled_results(store, sid)) == (0, 3, "run(s)")
    with sqlite3.connect(db) as con:  # one run as a Python without the framework would have recorded it
        run_id, text = con.execute("SELECT run_id, record FROM results ORDER BY rowid LIMIT 1").fetchone()
        record = {**json.loads(text), "error": "fake is not installed in this Python (pip install fake)"}
        con.execute("UPDATE results SET record=? WHERE run_id=?", (json.dumps(record), run_id))
        con.execute("UPDATE sessions SET state='interrupted' WHERE session_id=?", (sid,))
    with open_store(db, readonly=True) as store:
        assert work_left(plan, settled_results(store, sid)) == (1, 3, "run(s)")
    resumed = CliRunner().invoke(main, ["run", "--resume", sid, "--store", str(db), "-q"])
    assert "1 of 3 run(s) have no ok result" in resumed.output, resumed.output
    with open_store(db, readonly=True) as store:
        assert len(store.records()) == 4  # the one run again, the two answers not


def test_resume_matches_replicates_then_counts_the_rest_of_each_configuration():
    plan = [planned("A", r) for r in range(4)] + [planned("B", 0), planned("C"), planned("C")]
    # replicate 2 of A finished, and one A result without a replicate index; B's only run; one of C's two
    ok = [("A", 2), ("A", None), ("B", 0), ("C", None)]
    assert remaining_runs(plan, ok) == [False, True, False, True, False, False, True]
    assert remaining_runs(plan, []) == [True] * 7
    assert remaining_runs(plan, [("A", 1)] * 9) == [False] * 4 + [True] * 3  # more results than runs: none left


# --------------------------------------------------------------------------- resume keeps the session's settings (case 2)
def _data_limit(pid: int) -> int | None:
    """The RLIMIT_DATA of a running process, read from /proc/PID/limits."""
    try:
        for line in open(f"/proc/{pid}/limits", encoding="ascii"):
            if line.startswith("Max data size"):
                value = line.split()[3]
                return None if value == "unlimited" else int(value)
    except OSError:
        return None
    return None


def _limit_of_run(marker, count, timeout=120) -> int | None:
    _wait_for_marker(marker, count, timeout)
    return _data_limit(int(marker.read_text().split()[count - 1]))


def test_resume_applies_the_memory_limit_the_session_ran_with(tmp_path, fake_backend, write_scenario, harness_cli):
    if not os.path.exists("/proc/self/limits"):
        pytest.skip("needs /proc/PID/limits to see a worker's memory limit")
    marker = tmp_path / "lim.marker"
    path = write_scenario({
        "name": "lim", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, **ONE_PROCESS},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": [1, 2, 3]},
        "options": {"fake": {"action": "sleep", "seconds": 2.0, "marker": str(marker)}},
    })
    db = tmp_path / "lim.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db), "--memory-limit", "1.5GiB"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _limit_of_run(marker, 1) == 1610612736  # the first worker runs under the limit
    _wait_for_marker(marker, 2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    hint = re.search(r"finish with: harness (run --resume \S+ --store \S+)$", err.strip(), re.M).group(1)
    assert "--memory-limit" not in hint  # the printed command stays short: the store knows the limit
    session = hint.split()[2]
    # another limit on resume would mix two machines in one session: refused, nothing run
    code, _, refused = harness_cli("run", "--resume", session, "--store", str(db), "--memory-limit", "4GiB")
    assert code == 2 and "1.5GiB" in refused and "Traceback" not in refused
    assert len(marker.read_text().split()) == 2
    proc = subprocess.Popen([sys.executable, "-m", "harness", *hint.split()], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert _limit_of_run(marker, 3) == 1610612736  # the resumed worker runs under the same limit
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert sorted(r["params"]["batch"] for r in _ok(db)) == [1, 2, 3]


# --------------------------------------------------------------------------- damaged stores (case 3)
def _filled_store(path, rows=150):
    """A store of `rows` realistic records, closed (everything in the main file)."""
    with open_store(path) as store:
        store.begin_session("olds", [planned(f"k{i}") for i in range(rows)], scenario_path=None, command="test")
        for i in range(rows):
            store.add(Result(run_id=f"old{i}", session_id="olds", run_key=f"k{i}", status="ok",
                             started_at=f"2026-11-30T00:00:{i % 60:02d}", median=float(i), env={"pad": "e" * 1500}))


def _damage(path, how):
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        if how == "empty":
            fh.truncate(0)
        elif how == "not_a_database":
            fh.write(b"this is not a database" * 500)
        elif how == "header":
            fh.seek(100)
            fh.write(random.Random(1).randbytes(300))
        else:
            page = size // 4096 - 1 if how == "last_page" else size // 4096 // 2
            fh.seek(page * 4096)
            fh.write(random.Random(2).randbytes(4096))


@pytest.mark.parametrize("how", ["last_page", "middle_page", "header", "empty", "not_a_database"])
def test_a_damaged_store_is_refused_untouched_before_any_run(tmp_path, fake_backend, write_scenario, how):
    db = tmp_path / "old.db"
    _filled_store(db)
    _damage(db, how)
    before = db.read_bytes()
    path = _fake_scenario(write_scenario, tmp_path, 2)
    runner = CliRunner()
    result = runner.invoke(main, ["run", path, "--store", str(db)])
    assert result.exit_code == 2, result.output
    assert str(db) in result.output and "Traceback" not in result.output
    assert ("--import" in result.output or "delete it" in result.output or "not an SQLite database" in result.output)
    assert not (tmp_path / "s.marker").exists()  # no worker started
    assert db.read_bytes() == before  # not one byte written
    assert not (tmp_path / "old.db-wal").exists() and not (tmp_path / "old.db-shm").exists()
    for args in (["results", "--store", str(db)], ["compare", "--by", "backend", "--store", str(db)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 2 and str(db) in result.output and "Traceback" not in result.output, result.output
    # what a damaged store still holds can be taken into a new one, row by row
    result = runner.invoke(main, ["results", "--import", str(db), "--store", str(tmp_path / "new.db")])
    if how in ("last_page", "middle_page"):
        assert result.exit_code == 0, result.output
        with open_store(tmp_path / "new.db") as store:
            saved = store.records()
            assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert 100 <= len(saved) < 150 and all(r["session_id"] == "olds" for r in saved)
        RELIABILITY["rows salvaged from a store with a damaged page"] += len(saved)
    else:
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert db.read_bytes() == before
    RELIABILITY[f"damaged stores refused untouched ({how})"] += 1


def test_a_new_store_is_created_whole_and_an_empty_file_is_never_taken_for_one(tmp_path):
    db = tmp_path / "new.db"
    with open_store(db) as store:
        assert store.sessions() == []
    assert db.stat().st_size > 0  # created whole: never a 0-byte file a crash could leave behind
    assert not [p for p in tmp_path.iterdir() if ".creating-" in p.name]
    (tmp_path / "touched.db").write_bytes(b"")
    with pytest.raises(Exception) as info:
        open_store(tmp_path / "touched.db")
    assert "0 bytes" in str(info.value) and (tmp_path / "touched.db").stat().st_size == 0
    foreign = tmp_path / "foreign.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE notes (text TEXT)")
    db.commit()
    db.close()
    before = foreign.read_bytes()
    with pytest.raises(Exception) as info:
        open_store(foreign)
    assert "not a harness store (tables: notes)" in str(info.value) and foreign.read_bytes() == before


# --------------------------------------------------------------------------- a result the store cannot take (cases 3, 4)
class _FailingConnection:
    """An sqlite3 connection whose inserts of results fail, after `after` of them, as SQLite fails
    on a full disk or a damaged page."""

    def __init__(self, db, after, error):
        self._db, self._left, self._error = db, after, error

    def execute(self, sql, *args):
        if sql.lstrip().startswith("INSERT OR REPLACE INTO results"):
            if self._left <= 0:
                raise self._error
            self._left -= 1
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)


@pytest.mark.parametrize("error, take_back", [
    (sqlite3.OperationalError("database or disk is full"), "import"),
    (sqlite3.DatabaseError("database disk image is malformed"), "next_run"),
])
def test_a_result_the_store_cannot_take_is_kept_beside_it_and_taken_back(tmp_path, fake_backend, write_scenario,
                                                                          monkeypatch, error, take_back):
    path = _fake_scenario(write_scenario, tmp_path, 5)
    db = tmp_path / "f.db"
    opened = SQLiteStore._open_writable
    with monkeypatch.context() as patch:
        patch.setattr(SQLiteStore, "_open_writable", lambda self: _FailingConnection(opened(self), 2, error))
        result = CliRunner().invoke(main, ["run", path, "--store", str(db), "-q"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    (side,) = [p for p in tmp_path.iterdir() if ".unsaved-" in p.name]
    assert str(side) in result.output and "--resume" in result.output and "--import" in result.output
    kept = read_side_file(side.read_text())
    assert len(kept["records"]) == 3 and all(r["status"] == "ok" for r in kept["records"])  # 2 stored, the 3rd not
    assert len(kept["sessions"]) == 1 and len(kept["sessions"][0]["plan"]) == 5
    with open_store(db) as store:
        assert len(store.records()) == 2
        (session,) = store.sessions()
    assert session.state == "failed"  # never left running
    if take_back == "import":
        result = CliRunner().invoke(main, ["results", "--import", str(side), "--store", str(db)])
        assert result.exit_code == 0 and "took 1 new result(s) of 3" in result.output, result.output
        side.unlink()
    result = CliRunner().invoke(main, ["run", "--resume", session.session_id, "--store", str(db), "-q"])
    assert result.exit_code == 0, result.output
    assert "2 of 5 run(s) have no ok result" in result.output
    if take_back == "next_run":
        assert "took in 1 result(s)" in result.output and not side.exists()
    rows = _ok(db)
    assert sorted(r["params"]["batch"] for r in rows) == [1, 2, 3, 4, 5]
    RELIABILITY["rows lost"] += 5 - len(rows)
    RELIABILITY["results kept in a side file and taken back in"] += 1


@pytest.fixture
def small_filesystem(tmp_path):
    """A 3 MiB tmpfs (root and mount needed; skipped otherwise)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(folder):
    """Fill a file system to the last byte."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for chunk in (1 << 16, 1 << 12, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def test_a_full_file_system_loses_no_result(tmp_path, fake_backend, write_scenario, harness_cli, small_filesystem):
    path = _fake_scenario(write_scenario, tmp_path, 6, action="sleep", seconds=1.0)
    db = small_filesystem / "full.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db), "-q"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "s.marker", 3)  # two results stored, the third run under way
    _fill(small_filesystem)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "disk is full" in err and "Traceback" not in err
    side = re.search(r"are kept in (\S+\.json)", err).group(1)
    assert os.path.dirname(side) == str(tmp_path)  # nothing fits beside the store: the working folder
    measured = len(read_side_file(open(side, encoding="utf-8").read())["records"])
    assert measured >= 3
    code, _, refused = harness_cli("run", path, "--store", str(db))  # still full: refused before any run
    assert code == 2 and "disk is full" in refused and "Traceback" not in refused
    (small_filesystem / "filler").unlink()  # space again
    code, _, err2 = harness_cli("results", "--import", side, "--store", str(db))
    assert code == 0, err2
    session = re.search(r"--resume (\S+)", err).group(1)
    code, _, err2 = harness_cli("run", "--resume", session, "--store", str(db), "-q")
    assert code == 0, err2
    rows = _ok(db)
    assert sorted(r["params"]["batch"] for r in rows) == [1, 2, 3, 4, 5, 6]
    RELIABILITY["rows lost"] += 6 - len(rows)
    RELIABILITY["sessions on a file system that filled up, completed"] += 1


def test_a_full_disk_under_an_existing_store_is_named_and_leaves_the_store_as_it_was(
        tmp_path, fake_backend, write_scenario, harness_cli, small_filesystem):
    path = _fake_scenario(write_scenario, tmp_path, 1)
    db = small_filesystem / "old.db"
    open_store(db).close()
    before = db.read_bytes()
    _fill(small_filesystem)
    code, _, err = harness_cli("run", path, "--store", str(db))
    assert code == 2 and "Traceback" not in err, err
    assert "the disk is full" in err and "bytes free where the store is" in err, err  # not only "disk I/O error"
    assert sorted(p.name for p in small_filesystem.iterdir()) == ["filler", "old.db"]  # no empty -wal, -shm left
    assert db.read_bytes() == before and not (tmp_path / "s.marker").exists()
    RELIABILITY["full disks under an existing store, named and left as they were"] += 1


# --------------------------------------------------------------------------- signals at random moments
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "SIGINT"])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_signal_at_a_random_moment_loses_no_row(tmp_path, fake_backend, write_scenario, harness_cli, sig, seed):
    rng = random.Random(seed * 1000 + int(sig))
    path = _fake_scenario(write_scenario, tmp_path, 4, action="sleep", seconds=0.3)
    db = tmp_path / "r.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not db.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0.0, 5.0))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err
    reported = len(re.findall(r"^\[\d+/\d+\] ok", err, re.M))  # each line is printed once its row is stored
    with open_store(db) as store:  # opening it marks a session whose process is gone
        rows = store.records()
        sessions = store.sessions()
        assert store._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert len(rows) >= reported
    assert all(s.state != "running" for s in sessions)
    if sig == signal.SIGINT:
        assert proc.returncode in (0, 130), err
        if proc.returncode == 130 and "run(s) finished" in err:
            assert f"{len(rows)} of 4 run(s) finished" in err
    if sessions and len(rows) < 4:
        code, _, err = harness_cli("run", "--resume", sessions[0].session_id, "--store", str(db), "-q")
        assert code == 0, err
    elif not sessions:
        code, _, err = harness_cli("run", path, "--store", str(db), "-q")
        assert code == 0, err
    rows = _ok(db)
    assert sorted(r["params"]["batch"] for r in rows) == [1, 2, 3, 4]
    RELIABILITY["rows lost"] += 4 - len(rows)
    RELIABILITY[f"sessions stopped by {signal.Signals(sig).name} at a random moment, completed"] += 1


def test_a_report_names_a_session_that_ended_before_its_plan(tmp_path, fake_backend, write_scenario, harness_cli):
    # a run killed part-way leaves no record: a report of the rows alone would say every run ended ok
    path = _fake_scenario(write_scenario, tmp_path, 3)
    db = tmp_path / "r.db"
    code, _, err = harness_cli("run", path, "--store", str(db), "-q")
    assert code == 0, err
    with sqlite3.connect(db) as con:  # as if interrupted during the third run
        (session,) = [row[0] for row in con.execute("SELECT session_id FROM sessions")]
        con.execute("DELETE FROM results WHERE run_id = (SELECT run_id FROM results ORDER BY started_at DESC LIMIT 1)")
        con.execute("UPDATE sessions SET state = 'interrupted'")
    code, _, err = harness_cli("report", "--store", str(db), "-o", str(tmp_path / "rep"))
    assert code == 0, err
    text = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert f"Session {session} ended interrupted: 1 of its 3 planned run(s) have no ok result" in text
    assert f"harness run --resume {session}" in text and "Every run ended ok." not in text


# --------------------------------------------------------------------------- the store damaged under a running session
def _session_under(tmp_path, write_scenario, runs=6):
    """A session of `runs` runs started in its own process; returns (process, store path) once two results are
    stored and the third run is under way."""
    path = _fake_scenario(write_scenario, tmp_path, runs, action="sleep", seconds=0.5)
    db = tmp_path / "d.db"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", path, "--store", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_marker(tmp_path / "s.marker", 3)
    return proc, db


@pytest.mark.parametrize("keep", [0.5, 0.0], ids=["half", "zero-bytes"])
def test_a_store_truncated_under_a_running_session_loses_no_result(tmp_path, fake_backend, write_scenario,
                                                                   harness_cli, keep):
    proc, db = _session_under(tmp_path, write_scenario)
    os.truncate(db, int(db.stat().st_size * keep))
    _, err = proc.communicate(timeout=120)
    # every run printed ok, but the store does not give them back: said, exit 1, kept where import takes them
    assert proc.returncode == 1, err
    assert "cannot be read back from the store" in err and "Traceback" not in err
    side = re.search(r"are kept in (\S+\.json)", err).group(1)
    assert len(read_side_file(open(side, encoding="utf-8").read())["records"]) == 6
    fresh = tmp_path / "fresh.db"
    code, _, out = harness_cli("results", "--import", side, "--store", str(fresh))
    assert code == 0 and "took 6 new result(s) of 6 and 1 new session(s)" in out, out
    rows = _ok(fresh)
    assert sorted(r["params"]["batch"] for r in rows) == [1, 2, 3, 4, 5, 6]
    session = re.search(r"--resume (\S+)", err).group(1)
    code, out, err = harness_cli("run", "--resume", session, "--store", str(fresh), "-q")
    assert code == 0 and f"nothing to run: session {session} has every result (6 run(s))" in out, out + err
    assert not (tmp_path / "s.marker").read_text().count("\n") > 6
    RELIABILITY["rows lost"] += 6 - len(rows)
    RELIABILITY["sessions whose store was truncated under them, nothing lost"] += 1


def _make_immutable(db):
    """chattr +i on the store and its -wal and -shm (root and a file system that has the flag; skipped otherwise)."""
    files = [str(db), f"{db}-wal", f"{db}-shm"]
    done = subprocess.run(["chattr", "+i", *files], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not possible here: {done.stderr.strip()}")
    return lambda: subprocess.run(["chattr", "-i", *files], capture_output=True)


@pytest.mark.parametrize("how", ["shm-truncated", "immutable"])
def test_a_session_killed_by_sigbus_while_writing_loses_no_result(tmp_path, fake_backend, write_scenario,
                                                                  harness_cli, how):
    # SQLite maps the store's -shm file; a mapped page that can no longer be written ends the process with
    # SIGBUS, which no handler survives. The result is in the journal before the store is given it.
    if not hasattr(signal, "SIGBUS"):
        pytest.skip("no SIGBUS on this system")
    proc, db = _session_under(tmp_path, write_scenario)
    undo = None
    if how == "immutable":
        if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("chattr"):
            proc.kill()
            proc.communicate()
            pytest.skip("chattr +i needs root and chattr")
        undo = _make_immutable(db)
    else:
        os.truncate(f"{db}-shm", 0)
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if undo:
            undo()
    assert proc.returncode == -signal.SIGBUS, err
    assert "Bus error" in err  # said on standard error, not a silent death
    (journal,) = [p for p in tmp_path.iterdir() if ".unsaved-" in p.name]
    kept = read_side_file(journal.read_text())["records"]
    assert len(kept) == 3 and all(r["status"] == "ok" for r in kept)  # the run that had just finished too
    code, _, out = harness_cli("results", "--sessions", "--store", str(db))
    assert code == 0 and f"harness results --import {journal}" in out, out
    session = re.search(r"session (\w+): 6 run", err).group(1)
    code, _, out = harness_cli("run", "--resume", session, "--store", str(db), "-q")
    assert code == 0, out
    assert "3 of 6 run(s) have no ok result" in out and "took in 1 result(s)" in out, out  # 2 were stored
    assert len((tmp_path / "s.marker").read_text().split()) == 6  # nothing kept was measured again
    rows = _ok(db)
    assert sorted(r["params"]["batch"] for r in rows) == [1, 2, 3, 4, 5, 6]
    RELIABILITY["rows lost"] += 6 - len(rows)
    RELIABILITY[f"sessions killed by SIGBUS ({how}), nothing lost"] += 1


def test_a_store_made_immutable_under_a_session_says_its_last_records_are_only_in_the_log(
        tmp_path, fake_backend, write_scenario, harness_cli):
    # chattr +i on the store file alone: SQLite goes on committing into the -wal but cannot move it into the
    # file; the session says so and where, exit 1, and keeps a second copy (once: the store reads them back)
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("chattr"):
        pytest.skip("chattr +i needs root and chattr")
    proc, db = _session_under(tmp_path, write_scenario)
    done = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True)
    if done.returncode != 0:
        proc.kill()
        proc.communicate()
        pytest.skip(f"chattr +i is not possible here: {done.stderr.strip()}")
    try:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1, err
        assert f"its last records are only in {db}-wal" in err and "Traceback" not in err, err
        assert "the store reads all 6 back" in err and "--resume" not in err, err
        kept = re.search(r"is kept in (\S+\.json)", err).group(1)
        assert len(read_side_file(open(kept, encoding="utf-8").read())["records"]) == 6
        alone = tmp_path / "alone.db"
        shutil.copy(db, alone)  # the file without its log lacks the last records
        assert len(_ok(alone)) < 6
        assert len(_ok(db)) == 6  # with it, every one reads back
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)
    code, _, out = harness_cli("results", "--import", kept, "--store", str(db))
    assert code == 0 and "took 0 new result(s) of 6" in out, out
    shutil.copy(db, alone)
    assert len(_ok(alone)) == 6  # moved into the file: it holds every record alone
    RELIABILITY["rows lost"] += 6 - len(_ok(db))
