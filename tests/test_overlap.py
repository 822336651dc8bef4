"""The next run's worker imports its framework while the current run sets up, and is paused (SIGSTOP) from
the current run's first step to its last measurement; it then takes its own run without importing again."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace

from harness.results.store import open_store
from harness.scenario.load import load_scenario
from harness.session.ahead import AheadWorker, WorkersAhead
from harness.session.plan import build_plan
from harness.session.runner import Runner
from harness.worker.neighbours import paused


def _plan(write_scenario, runs=3):
    scenario = load_scenario(write_scenario({
        "name": "overlap", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": 1},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": list(range(1, runs + 1))},
        "options": {"fake": {"action": "ok"}},
    }))
    return build_plan(scenario, "s")


def test_each_run_is_taken_by_a_worker_that_imported_while_the_previous_run_set_up(
        tmp_path, fake_backend, write_scenario):
    with open_store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, overlap=True)
        outcome = runner.run(_plan(write_scenario))
        runner.close()
    records = outcome.records
    assert [r.status for r in records] == ["ok"] * 3
    assert "imported_ahead" not in records[0].phases_s  # the first run has nothing before it
    assert all("imported_ahead" in r.phases_s for r in records[1:])
    # while runs 1 and 2 were timed, the worker of the run after them was stopped; the last run had none
    assert [getattr(r.checks, "paused_states", None) for r in records] == [["T"], ["T"], None]
    assert [r.timing.paused_workers for r in records] == [1, 1, None]


def test_without_overlap_no_worker_starts_ahead(tmp_path, fake_backend, write_scenario):
    with open_store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, overlap=False)
        records = runner.run(_plan(write_scenario, runs=2)).records
        runner.close()
    assert not any("imported_ahead" in r.phases_s for r in records)
    assert [getattr(r.checks, "paused_states", None) for r in records] == [None, None]


def test_on_a_cpu_runs_do_not_overlap_unless_asked(tmp_path, fake_backend, write_scenario):
    spec = _plan(write_scenario, runs=1)[0]
    assert not Runner(None).ahead.overlapping(spec)  # the plan's device is the CPU
    assert not Runner(None, overlap=True).ahead.overlapping(
        replace(spec, probe=True))


def test_paused_stops_the_named_process_groups_and_lets_them_go_on(monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        monkeypatch.setenv("HARNESS_PAUSE_PIDS", f"{proc.pid},999999999")

        def state():
            time.sleep(0.2)
            with open(f"/proc/{proc.pid}/stat", encoding="ascii") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0]

        with paused() as stopped:
            assert stopped == [proc.pid] and state() == "T"  # one that does not exist is skipped
        assert state() in ("S", "R")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_run_decided_without_a_worker_does_not_cost_the_next_run_its_worker_ahead(
        tmp_path, fake_backend, write_scenario):
    first, last = _plan(write_scenario, runs=2)
    # between them, a run no worker takes (its backend is not registered: decided at once, `unsupported`)
    decided = first.__class__(**{**first.__dict__, "run_id": first.run_id + "-x", "backend": "absent"})
    with open_store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, overlap=True)
        records = runner.run([first, decided, last]).records
        runner.close()
    assert [r.status for r in records] == ["ok", "unsupported", "ok"]
    # the worker started beside the first run was the last run's, passing over the decided one
    assert records[0].checks.paused_states == ["T"]
    assert "imported_ahead" in records[2].phases_s


def test_with_several_workers_ahead_each_imports_through_every_set_up_until_its_run(
        tmp_path, fake_backend, write_scenario, monkeypatch):
    monkeypatch.setattr(WorkersAhead, "depth", staticmethod(lambda: 2))
    started = []
    start_ahead = WorkersAhead.start
    monkeypatch.setattr(WorkersAhead, "start", lambda self, spec, env: started.append(spec.run_id)
                        or start_ahead(self, spec, env))
    plan = _plan(write_scenario, runs=4)
    with open_store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, overlap=True)
        records = runner.run(plan).records
        runner.close()
    assert [r.status for r in records] == ["ok"] * 4
    assert started == [spec.run_id for spec in plan[1:]]  # one worker each, kept from the run it started in
    # run 1 started the workers of runs 2 and 3; run 2 kept run 3's and started run 4's; run 3 had run 4's
    assert [r.timing.paused_workers for r in records] == [2, 2, 1, None]
    assert [getattr(r.checks, "paused_states", None) for r in records] == [["T", "T"], ["T", "T"], ["T"], None]
    assert all("imported_ahead" in r.phases_s for r in records[1:])
    assert not runner.ahead.pool  # none left over


def test_a_worker_ahead_that_no_coming_run_takes_is_stopped(tmp_path, fake_backend, write_scenario, monkeypatch):
    monkeypatch.setattr(WorkersAhead, "depth", staticmethod(lambda: 2))
    first, second = _plan(write_scenario, runs=2)
    with open_store(str(tmp_path / "o.db")) as store:
        runner = Runner(store, overlap=True)
        stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
        runner.ahead.pool.append(AheadWorker(("fake", ()), stray, tempfile.TemporaryDirectory()))  # a worker for no one
        records = runner.run([first, second]).records
        stopped = stray.poll() is not None  # before close(), which stops whatever is left
        runner.close()
    assert stopped  # when the first run looked at what comes next
    assert [r.timing.paused_workers for r in records] == [1, None]  # only the second run's was paused
