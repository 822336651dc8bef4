"""`--executor slurm` against a real single-node Slurm (scripts/services.sh starts it), results into a real
PostgreSQL server: a sweep of CPU runs as one job array, a job cancelled with scancel and one over its time limit
(each run's status right, Slurm's state kept), a node drained mid-session, Ctrl-C of the submitter (its jobs
cancelled) and --resume submitting only what has no result. Runs use the test backend (tests/fake_backend.py)
in real worker processes inside the jobs."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from harness.errors import InputError
from harness.results.store import open_store
from harness.session.executors import endings
from harness.session.executors.queue import JobState
from harness.session.executors.settings import SlurmSettings
from tests import services

#: one node: its tests drain it and count its jobs, so under pytest-xdist they all run in one worker, in turn
pytestmark = pytest.mark.xdist_group("slurm")

pg_url = services.pg_url  # the fixtures: a fresh database on the test server, a Slurm to submit to
slurm = services.slurm


def _scenario(tmp_path, seconds, action="sleep"):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "s", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": 1},
        "backends": ["fake"], "devices": ["cpu"],
        "sweep": {"fake.seconds": list(seconds)},
        "options": {"fake": {"action": action, "marker": str(tmp_path / "started")}},
    }), encoding="utf-8")
    return str(path)


def _submit(tmp_path, *args):
    """The submitter, with the database password in its environment too (PGPASSWORD)."""
    return subprocess.Popen([sys.executable, "-m", "harness", "run", *args], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PGPASSWORD": "harness-test"})


def _session_jobs(session_id):
    lines = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-n", f"harness-{session_id[:8]}", "-o", "%i|%T"],
                           capture_output=True, text=True).stdout.split()
    return dict(line.split("|") for line in lines)


def _wait(predicate, timeout=120, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _sessions(url):
    try:
        with open_store(url, readonly=True) as store:
            return [s.session_id for s in store.sessions()]
    except InputError:  # the submitter has not created the tables yet
        return []


def _started(tmp_path, count):
    marker = tmp_path / "started"
    return marker.exists() and len(marker.read_text().split()) >= count


def _by_seconds(records):
    return {r["options"]["seconds"]: r for r in records}


def test_a_sweep_through_slurm_into_postgresql_with_scancel_and_a_time_limit(tmp_path, fake_backend, slurm, pg_url):
    path = _scenario(tmp_path, [0.5, 300, 0.6, 40])
    config = tmp_path / "slurm.yaml"
    config.write_text("array_size: 3\ntime: '5'\n", encoding="utf-8")  # the flag's time wins over the file's
    proc = _submit(tmp_path, path, "--executor", "slurm", "--store", pg_url, "--slurm-config", str(config),
                   "--slurm-time", "0:10", "--slurm-arg", "comment=harness-test", "--slurm-arg", "no-requeue=")
    session_id = _wait(lambda: _sessions(pg_url), what="the session")[0]
    jobs = _wait(lambda: _session_jobs(session_id) if len(_session_jobs(session_id)) == 4 else None, what="4 jobs")
    assert len({j.split("_")[0] for j in jobs}) == 2  # job arrays of at most 3 tasks
    shown = subprocess.run(["scontrol", "show", "job", sorted(jobs)[0]], capture_output=True, text=True).stdout
    assert "Comment=harness-test" in shown and "Requeue=0" in shown  # --slurm-arg reached sbatch
    for array in {j.split("_")[0] for j in jobs}:  # Slurm keeps each job's environment on disk: no password in it
        kept = f"/var/spool/slurmctld/hash.{int(array) % 10}/job.{array}/environment"
        assert os.path.exists(kept) and "harness-test" not in open(kept, encoding="latin-1").read()
    _wait(lambda: _started(tmp_path, 4), what="every job to start")
    with open_store(pg_url, readonly=True) as store:
        # runs that ended are stored while the others still run
        _wait(lambda: len(store.records()) >= 2, what="the short runs' results")
        assert len(store.records()) == 2
    job_of = {}
    for folder in (tmp_path / "harness-slurm" / session_id).iterdir():
        spec = folder / "spec.json"
        if spec.exists():
            job_of[json.loads(spec.read_text())["options"]["seconds"]] = folder
    placement = job_of[40] / "placement.json"
    cancel = json.loads(_wait(lambda: placement.exists() and placement.read_text(), what="placement"))["job_id"]
    subprocess.run(["scancel", cancel], check=True)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, err  # a run failed and one timed out
    with open_store(pg_url, readonly=True) as store:
        records = _by_seconds(store.records())
        session = store.sessions()[0]
    assert session.state == "finished" and session.results == 4
    assert records[0.5]["status"] == records[0.6]["status"] == "ok"
    assert records[0.5]["slurm"]["state"] == "COMPLETED" and records[0.5]["slurm"]["node"]
    assert records[40]["status"] == "failed" and records[40]["error"].startswith("cancelled:")
    assert records[40]["slurm"]["state"] == "CANCELLED" and records[40]["slurm"]["job_id"] == cancel
    assert records[300]["status"] == "timeout" and records[300]["slurm"]["state"] == "TIMEOUT"
    assert "time limit" in records[300]["error"]
    assert "submitted as job array" in err


def test_ctrl_c_cancels_the_jobs_and_resume_submits_only_the_rest(tmp_path, fake_backend, slurm, pg_url):
    config = tmp_path / "slurm.yaml"
    config.write_text("parallel: 1\npoll_s: 0.5\n", encoding="utf-8")  # one job at a time
    path = _scenario(tmp_path, [1.0, 1.1, 1.2, 1.3])
    proc = _submit(tmp_path, path, "--executor", "slurm", "--slurm-config", str(config), "--store", pg_url)
    _wait(lambda: _started(tmp_path, 2), what="the second job to start")
    with open_store(pg_url, readonly=True) as store:
        session_id = store.sessions()[0].session_id
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    # nothing of the session is left queued or running
    left = _wait(lambda: (lambda j: j if not {"PENDING", "RUNNING", "COMPLETING"} & set(j.values()) else None)(
        _session_jobs(session_id)), timeout=60, what="the jobs to be cancelled")
    assert "CANCELLED" in left.values()
    with open_store(pg_url, readonly=True) as store:
        first = store.records()
        assert store.sessions()[0].state == "interrupted"
    assert 1 <= len(first) < 4
    done = subprocess.run([sys.executable, "-m", "harness", "run", "--resume", session_id, "--executor", "slurm",
                           "--slurm-config", str(config), "--store", pg_url], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{4 - len(first)} of 4 run(s) have no ok result" in done.stderr
    with open_store(pg_url, readonly=True) as store:
        records = store.records()
        assert store.sessions()[0].state == "finished"
    assert len(records) == 4 and len({r["run_key"] for r in records}) == 4
    assert {r["status"] for r in records} == {"ok"}


def test_a_node_drained_mid_session_holds_the_jobs_and_says_why(tmp_path, fake_backend, slurm, pg_url):
    config = tmp_path / "slurm.yaml"
    config.write_text("parallel: 1\npoll_s: 0.5\n", encoding="utf-8")
    path = _scenario(tmp_path, [3.0, 0.1, 0.2])
    proc = _submit(tmp_path, path, "--executor", "slurm", "--slurm-config", str(config), "--store", pg_url)
    try:
        _wait(lambda: _started(tmp_path, 1), what="the first job to start")
        subprocess.run(["scontrol", "update", "NodeName=localhost", "State=DRAIN", "Reason=harness-test"], check=True)
        with open_store(pg_url, readonly=True) as store:
            session_id = store.sessions()[0].session_id
        _wait(lambda: "PENDING" in _session_jobs(session_id).values() and
              all(v != "RUNNING" for v in _session_jobs(session_id).values()), what="the first job to end")
        time.sleep(2)  # the submitter sees the reason
        with open_store(pg_url, readonly=True) as store:
            assert len(store.records()) == 1  # the running job finished on the draining node
    finally:
        subprocess.run(["scontrol", "update", "NodeName=localhost", "State=RESUME"], check=True)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert "slurm: job(s) pending:" in err and "DRAINED" in err
    with open_store(pg_url, readonly=True) as store:
        assert [r["status"] for r in store.records()] == ["ok"] * 3


def test_bad_slurm_options_are_refused_before_anything_runs(tmp_path, fake_backend, write_scenario, harness_cli):
    path = _scenario(tmp_path, [0.1])
    bad = tmp_path / "slurm.yaml"
    bad.write_text("partition: gpu\ntime: soon\n", encoding="utf-8")
    code, out, err = harness_cli("run", path, "--executor", "slurm", "--slurm-config", str(bad))
    assert code == 2 and str(bad) in err and "time" in err and "Traceback" not in err
    code, out, err = harness_cli("run", path, "--slurm-partition", "gpu")
    assert code == 2 and "--slurm-partition is for --executor slurm" in err
    code, out, err = harness_cli("run", path, "--executor", "slurm", "--slurm-arg", "qos")
    assert code == 2 and "KEY=VALUE" in err
    assert not (tmp_path / "harness.db").exists() and not (tmp_path / "harness-slurm").exists()


@pytest.mark.parametrize("state, status, starts", [
    ("TIMEOUT", "timeout", "Slurm ended job 7_1 at its time limit"),
    ("OUT_OF_MEMORY", "oom", "Slurm ended job 7_1: out of memory"),
    ("NODE_FAIL", "failed", "node failure: Slurm lost node gpu-3"),
    ("PREEMPTED", "failed", "preempted:"),
    ("CANCELLED", "failed", "cancelled:"),
    ("BOOT_FAIL", "failed", "Slurm job 7_1 ended BOOT_FAIL"),
])
def test_how_slurm_ended_a_job_becomes_the_runs_status(tmp_path, state, status, starts):
    """The endings the single-node cluster cannot produce on demand (a node failing, a preemption, the
    kernel's out-of-memory killer in a job's cgroup), from the state squeue reports."""
    ending = endings.ending("7_1", tmp_path, JobState(state, "Reason X", "gpu-3"), SlurmSettings(time="30").time)
    assert ending["status"] == status
    assert ending["error"].startswith(starts) and ending["error"].endswith("(Slurm's reason: Reason X)")


def test_an_array_sbatch_refuses_is_recorded_failed_and_the_submitted_ones_go_on(tmp_path, fake_backend, slurm):
    # the test cluster has no GPU: sbatch refuses the array of the cuda:0 runs (after the CPU runs' array went in);
    # those runs are recorded failed with sbatch's reason, the CPU ones run, no traceback, and --resume tries again
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "s", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": 1},
        "backends": ["fake"], "devices": ["cpu", "cuda:0"], "sweep": {"fake.seconds": [0.1, 0.2]},
        "options": {"fake": {"action": "sleep", "marker": str(tmp_path / "started")}},
    }), encoding="utf-8")
    store = tmp_path / "h.db"
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--executor", "slurm", "--store",
                           str(store)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert "slurm: sbatch refused a job array (" in done.stderr + done.stdout
    with open_store(str(store), readonly=True) as opened:
        records = {(r["device"], r["status"]): r for r in opened.records()}
    assert {key for key in records} == {("cpu", "ok"), ("cuda:0", "failed")}
    refused = records[("cuda:0", "failed")]["error"]
    assert refused.startswith("not submitted: sbatch refused its job array (") and "--resume" in refused
    assert len((tmp_path / "started").read_text().split()) == 2  # the two CPU runs, each once
