"""A job Slurm no longer lists, against the real single-node Slurm: squeue asked only of jobs it does not know
fails ("Invalid job id specified"), which is read as "not listed", so the job is resolved through sacct where
the cluster keeps accounting and its own files where it does not (the test cluster keeps none); a job nothing
tells the state of is recorded lost, with why, once `lost_after_s` has passed, never waited on for ever."""

import json
import random
import signal
import time

import pytest

from harness.results.record import Result
from harness.session.executors import queue
from harness.session.executors.settings import SlurmSettings
from harness.session.executors.slurm import SlurmExecutor, _Job
from harness.session.plan import RunSpec
from harness.session.runner import SessionOutcome
from tests import services

pytestmark = pytest.mark.xdist_group("slurm")
slurm = services.slurm


class _Collector:
    """What the executor hands a run's record to (the session's Runner): a store that keeps them in a list."""

    def __init__(self):
        self.records: list[Result] = []
        self.store = self
        self.started: list[int] = []

    def add(self, record: Result) -> None:
        self.records.append(record)

    def on_start(self, i, n, spec) -> None:
        self.started.append(i)

    def on_result(self, i, n, record) -> None:
        pass

    def on_progress(self, spec, event) -> None:
        pass


def _unknown_job_id() -> str:
    """An array task id Slurm has never had (far above the ids a test cluster reaches)."""
    return f"{random.randrange(60_000_000, 67_000_000)}_0"


def _job(tmp_path, job_id, *, result: dict | None, exit_code: int | None) -> _Job:
    spec = RunSpec(run_id="r1", session_id="s1", run_key="k1", scenario="s", workload="gemm", backend="fake",
                   device="cpu", params={"size": 8}, measure={"timeout_s": 60}, seed=0)
    folder = tmp_path / "run"
    folder.mkdir()
    if result is not None:
        (folder / "result.json").write_text(json.dumps(result), encoding="utf-8")
    if exit_code is not None:
        (folder / "exit.json").write_text(json.dumps({"returncode": exit_code}), encoding="utf-8")
    past = time.monotonic() - 60  # submitted a minute ago: past the grace in which a new job may be unlisted
    return _Job(1, spec, folder, job_id=job_id, submitted_at=past, told_at=past)


def _collect(job, **settings) -> list[Result]:
    runner = _Collector()
    previous = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(TimeoutError("still waiting")))
    signal.alarm(60)  # a collector that waits for ever fails the test, not the suite
    try:
        SlurmExecutor(SlurmSettings(poll_s=0.1, **settings))._collect(runner, [job], 1, SessionOutcome())
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return runner.records


def test_a_job_squeue_no_longer_knows_is_resolved_from_its_own_files(tmp_path, slurm):
    job_id = _unknown_job_id()
    answer = queue.poll([job_id])
    assert answer.states == {} and answer.error == ""  # squeue failed, "Invalid job id": nothing listed
    job = _job(tmp_path, job_id, result={"status": "ok", "median": 0.25, "unit": "s"}, exit_code=0)
    [record] = _collect(job)
    assert record.status == "ok" and record.median == 0.25
    assert record.to_dict()["slurm"]["job_id"] == job_id and record.to_dict()["slurm"]["state"] == "COMPLETED"


def test_a_forgotten_job_that_wrote_no_result_is_failed_with_its_exit_code(tmp_path, slurm):
    [record] = _collect(_job(tmp_path, _unknown_job_id(), result=None, exit_code=3))
    assert record.status == "failed" and "worker exited with code 3 before writing a result" in record.error


def test_a_job_nothing_tells_of_is_recorded_lost_after_the_bound(tmp_path, slurm, monkeypatch):
    # the real squeue (and sacct), pointed at a configuration they cannot read, fail at once, as they do where the
    # controller cannot be reached (after a minute's timeout); the job has no files of its own
    broken = tmp_path / "broken-slurm.conf"
    broken.write_text("not a slurm.conf\n", encoding="utf-8")
    monkeypatch.setenv("SLURM_CONF", str(broken))
    assert queue.poll(["5_0"]).states is None
    started = time.monotonic()
    [record] = _collect(_job(tmp_path, _unknown_job_id(), result=None, exit_code=None), lost_after_s=1.0)
    assert time.monotonic() - started < 30
    assert record.status == "failed" and record.to_dict()["slurm"]["state"] == "LOST"
    assert record.error.startswith("lost: how Slurm job") and "squeue: " in record.error
    # ... while one whose worker has ended is resolved from its files even with squeue unreachable
    other = tmp_path / "other"
    other.mkdir()
    [done] = _collect(_job(other, _unknown_job_id(), result={"status": "ok", "median": 1.0}, exit_code=0),
                      lost_after_s=1.0)
    assert done.status == "ok" and done.to_dict()["slurm"]["state"] == "COMPLETED"


@pytest.mark.parametrize("lines, error, states", [
    (None, "slurm_load_jobs error: Invalid job id specified", {}),
    (None, "slurm_load_jobs error: Unable to contact slurm controller (connect failure)", None),
    (["12_3|RUNNING|None|node1", "12_4|PENDING|Resources|"], "",
     {"12_3": queue.JobState("RUNNING", "", "node1"), "12_4": queue.JobState("PENDING", "Resources", "")}),
])
def test_squeues_answer_is_read_as_listed_not_listed_or_no_answer(lines, error, states):
    assert queue.listing(lines, error).states == states


def test_sacct_gives_the_end_of_a_job_where_the_cluster_keeps_accounting():
    # the test cluster keeps no accounting (sacct fails: None); where one does, sacct's answer names the job,
    # its steps beside it, its state with who cancelled it
    answer = ["41_3|CANCELLED by 1000|node7", "41_3.batch|CANCELLED|node7", "41_4|COMPLETED|node8"]
    assert queue.accounting("41_3", answer) == queue.JobState("CANCELLED", "", "node7")
    assert queue.accounting("41_4", answer).ended and queue.accounting("41_5", answer) is None
    assert queue.accounting("41_3", None) is None
    assert queue.accounted(_unknown_job_id()) is None  # the test cluster: accounting disabled
