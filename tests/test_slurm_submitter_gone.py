"""A submitter that goes away mid-session, against the real single-node Slurm and PostgreSQL: SIGHUP (its terminal
closed) cancels its jobs and marks the session interrupted, as SIGTERM does; after kill -9, which cancels nothing,
`--resume` finds the arrays the dead submitter left (their job ids are written beside each run's spec), takes in
every result they wrote and waits for what still runs: no run is submitted, or measured, twice."""

import signal
import subprocess
import sys

import pytest

from harness.results.store import open_store
from tests import services
from tests.test_slurm import (
    _scenario,
    _session_jobs,
    _sessions,
    _started,
    _submit,
    _wait,
)

pytestmark = pytest.mark.xdist_group("slurm")
pg_url = services.pg_url
slurm = services.slurm


def _config(tmp_path):
    config = tmp_path / "slurm.yaml"
    config.write_text("parallel: 1\npoll_s: 0.3\n", encoding="utf-8")  # one job at a time
    return config


def test_sighup_cancels_the_jobs_and_marks_the_session_interrupted(tmp_path, fake_backend, slurm, pg_url):
    config = _config(tmp_path)
    proc = _submit(tmp_path, _scenario(tmp_path, [0.5, 30, 30]), "--executor", "slurm", "--slurm-config", str(config),
                   "--store", pg_url)
    _wait(lambda: _started(tmp_path, 2), what="the second job to start")
    session_id = _sessions(pg_url)[0]
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 129, err
    assert "interrupted by SIGHUP" in err
    left = _wait(lambda: (lambda j: j if not {"PENDING", "RUNNING", "COMPLETING"} & set(j.values()) else None)(
        _session_jobs(session_id)), timeout=60, what="the jobs to be cancelled")
    assert list(left.values()).count("CANCELLED") == 2
    with open_store(pg_url, readonly=True) as store:
        assert store.sessions()[0].state == "interrupted"
        assert [r["options"]["seconds"] for r in store.records()] == [0.5]


def test_resume_after_the_submitter_was_killed_adopts_its_jobs_and_runs_nothing_twice(
        tmp_path, fake_backend, slurm, pg_url):
    config = _config(tmp_path)
    proc = _submit(tmp_path, _scenario(tmp_path, [0.2, 0.3, 2.0, 0.4, 0.5]), "--executor", "slurm",
                   "--slurm-config", str(config), "--store", pg_url)
    _wait(lambda: _started(tmp_path, 3), what="the third job to start")
    session_id = _sessions(pg_url)[0]
    proc.kill()  # kill -9: nothing cancelled, the session left `running`
    proc.communicate(timeout=60)
    jobs = _session_jobs(session_id)
    assert len(jobs) == 5 and {"RUNNING", "PENDING"} & set(jobs.values()), jobs  # the array goes on
    with open_store(pg_url, readonly=True) as store:
        before = len(store.records())
    assert before < 5
    done = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", session_id, "--executor", "slurm",
                           "--slurm-config", str(config), "--store", pg_url], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{5 - before} run(s) taken over from job array" in done.stderr
    assert "submitted as job array" not in done.stderr  # nothing submitted again
    assert len(_session_jobs(session_id)) == 5  # the dead submitter's array and no other
    with open_store(pg_url, readonly=True) as store:
        records = store.records()
        assert store.sessions()[0].state == "finished"
    assert len(records) == 5 and len({r["run_key"] for r in records}) == 5
    assert {r["status"] for r in records} == {"ok"}
    assert len((tmp_path / "started").read_text().split()) == 5  # each run measured once
