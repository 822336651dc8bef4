"""The host-wide timing lock: two harness sessions on one host never time runs at the same moment; a session
that finds the lock taken waits and says so; sharing the host is a choice each record keeps and compare marks."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.machine.envcheck import busy_reasons
from harness.results.store import open_store
from harness.session.progress import LockWait
from harness.worker import hostlock
from harness.worker.hostlock import timing_lock

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def lock_file(tmp_path, monkeypatch):
    """A lock file of this test's own, for this process and the sessions it starts."""
    path = str(tmp_path / "timing.lock")
    monkeypatch.setenv(hostlock.LOCK_VARIABLE, path)
    return path


def _scenario(write_scenario, name: str) -> str:
    # adaptive blocks: each run is timed for at least 0.6 s, long enough for two sessions' runs to meet
    return write_scenario({
        "name": name, "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": "auto", "min_block_s": 0.1, "repeats": 2, "min_time_s": 0.6,
                    "max_repeats": 1000, "timeout_s": 300, "processes": 1},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": [1, 2]},
        "options": {"fake": {"action": "ok"}},
    }, name=f"{name}.yaml")


def _session(tmp_path, scenario: str, name: str, *extra: str) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / f"{name}.err"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", scenario, "--store", str(tmp_path / f"{name}.db"),
                             *extra], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(err, "w"),
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ["PYTHONPATH"]])})
    return proc, err


def _wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def _isolations(path: Path) -> list[dict]:
    with open_store(str(path)) as store:
        records = store.records()
    assert [r["status"] for r in records] == ["ok", "ok"]
    return [r["env"]["isolation"] for r in records]


def test_two_sessions_never_time_at_once_and_the_one_that_waits_says_so(tmp_path, fake_backend, write_scenario,
                                                                         lock_file):
    held = threading.Event()
    release = threading.Event()

    def hold():  # the lock taken first by someone else: both sessions must wait for it
        with timing_lock(False, {"run": "a run of the test"}):
            held.set()
            release.wait(180)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        sessions = [_session(tmp_path, _scenario(write_scenario, name), name, *quiet)
                    for name, quiet in (("one", ()), ("two", ("-q",)))]
        waiting = "waiting for the host timing lock"
        _wait_for(lambda: all(waiting in err.read_text() for _, err in sessions))
    finally:
        release.set()
        holder.join()
    for proc, err in sessions:
        assert proc.wait(timeout=300) == 0, err.read_text()[-2000:]
    text = sessions[0][1].read_text()
    assert f"held by pid {os.getpid()}, run a run of the test" in text and "got the host's timing lock" in text
    quiet = sessions[1][1].read_text().splitlines()
    told = [line for line in quiet if line.startswith("waiting for the host timing lock, held by")]
    assert told and all(len(line) <= 120 for line in told), quiet  # said under -q too, a line a wait
    assert any(f"held by pid {os.getpid()}, run a run of the test" in line for line in told), told
    after = [quiet[i + 1] for i, line in enumerate(quiet[:-1]) if line in told]
    assert not any(line.startswith("  ") for line in after)  # no continuation: one line each
    spans = _isolations(tmp_path / "one.db") + _isolations(tmp_path / "two.db")
    for db in ("one.db", "two.db"):  # the wait is its own phase, not the steps' nor the run's time
        with open_store(str(tmp_path / db)) as store:
            waited = [r for r in store.results() if r.env.isolation.waited_s > 0]
        assert waited and all(r.phases_s.lock_wait == pytest.approx(r.env.isolation.waited_s) for r in waited)
        assert all(r.run_s == pytest.approx(r.duration_s - r.phases_s.lock_wait) for r in waited)
    assert {s["mode"] for s in spans} == {"exclusive"} and {s["lock"] for s in spans} == {lock_file}
    assert sum(s["waited_s"] > 0 for s in spans) >= 2  # each session's first run waited for the test
    ordered = sorted((s["held_from"], s["held_to"]) for s in spans)
    assert all(end <= start for (_, end), (start, _) in zip(ordered, ordered[1:])), ordered  # never overlapping


def test_shared_runs_time_together_but_never_beside_an_exclusive_one(lock_file):
    with timing_lock(True, {}) as first, timing_lock(True, {}) as second:  # two sharing sessions: no wait
        assert first["mode"] == second["mode"] == "shared" and first["waited_s"] == second["waited_s"] == 0
        events = []
        waiter = threading.Thread(target=lambda: timing_lock(False, {}, lambda *a, **k: events.append(k)).__enter__())
        waiter.start()
        time.sleep(0.5)
        assert events and events[0]["waiting"] and len(events) == 1  # the exclusive run waits for both
    waiter.join(10)
    assert len(events) == 2 and events[1]["waited_s"] > 0.3


def test_a_lock_file_that_cannot_be_opened_leaves_the_run_unlocked_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv(hostlock.LOCK_VARIABLE, str(tmp_path / "no such folder" / "timing.lock"))
    with timing_lock(False, {}) as isolation:
        assert isolation["mode"] == "unlocked" and "cannot open" in isolation["reason"]
    assert busy_reasons({"isolation": isolation}, "cpu")[0].startswith("timed without the host's timing lock")


def test_the_lock_is_host_wide_by_default(monkeypatch):
    monkeypatch.delenv(hostlock.LOCK_VARIABLE, raising=False)
    monkeypatch.setenv("TMPDIR", "/somewhere/of/one/job")
    assert hostlock.lock_path() == "/tmp/harness-timing.lock"


def test_the_time_spent_waiting_for_the_lock_is_not_counted_against_the_timeout(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("harness.session.progress.time.monotonic", lambda: now[0])
    wait = LockWait()
    wait.note({"phase": "block"})
    wait.note({"phase": "host_lock", "waiting": True})
    now[0] = 130.0
    assert wait.seconds() == 30.0  # still waiting
    wait.note({"phase": "host_lock", "waiting": False, "waited_s": 30.0})
    now[0] = 500.0
    assert wait.seconds() == 30.0


def test_a_shared_run_is_recorded_and_compare_marks_its_verdicts(tmp_path, fake_backend, write_scenario, lock_file,
                                                                harness_cli):
    scenario = write_scenario({
        "name": "shared", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 3, "processes": 2},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"precision": ["fp32", "bf16"]},
        "options": {"fake": {"action": "ok"}},
    })
    store = str(tmp_path / "s.db")
    code, out, err = harness_cli("run", scenario, "--store", store, "--share-host", "--dry-run")
    assert code == 0 and "host shared with other sessions (share_host)" in out + err, err
    code, _, err = harness_cli("run", scenario, "--store", store, "--share-host", "-q")
    assert code == 0, err
    with open_store(store) as opened:
        records = opened.records()
    assert {r["env"]["isolation"]["mode"] for r in records} == {"shared"}
    assert {r["measure"]["share_host"] for r in records if r.get("measure")} <= {True}
    code, out, err = harness_cli("compare", "--store", store, "--by", "precision")
    assert code == 0, err
    assert "(busy machine)" in out and "share-host" in out


@pytest.mark.parametrize("how", [("--set", "measure.share_host=sometimes"), ("--set", "measure.share_hosts=true")])
def test_a_bad_share_host_setting_exits_2_naming_the_field(tmp_path, fake_backend, write_scenario, harness_cli, how):
    scenario = write_scenario({"name": "bad", "workload": "gemm", "params": {"size": 32}, "backends": ["fake"],
                               "devices": ["cpu"]})
    store = tmp_path / "bad.db"
    code, out, err = harness_cli("run", scenario, "--store", str(store), *how)
    assert code == 2 and "Traceback" not in err
    assert "share_host" in err
    assert not store.exists()


def test_a_holder_is_named_by_its_sessions_pid_and_command(monkeypatch, tmp_path):
    argv = b"\0".join([b"/opt/venv/bin/python", b"-m", b"harness", b"run", b"quickstart", b"-q"]) + b"\0"
    real_open = open

    def fake_open(path, *args, **kwargs):
        return real_open(tmp_path / "cmdline", *args, **kwargs) if path == "/proc/4242/cmdline" else \
            real_open(path, *args, **kwargs)

    (tmp_path / "cmdline").write_bytes(argv)
    monkeypatch.setattr("builtins.open", fake_open)
    assert hostlock.process_command(4242) == "harness run quickstart -q"
    who = {"pid": 4300, "run": "torch gemm on cpu", "session": "abc", **hostlock.session_of(4242)}
    assert hostlock.describe_holder(who) == "pid 4242 (harness run quickstart -q), run torch gemm on cpu, session abc"
    monkeypatch.setattr("builtins.open", real_open)
    assert hostlock.process_command(2**22 + 7) is None  # no such process: nothing made up
    assert hostlock.describe_holder({"pid": 7}) == "pid 7"
