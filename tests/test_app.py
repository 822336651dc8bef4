"""The application layer (harness.session.app) driven from Python, without the command line: a session run,
one interrupted and resumed, and requests refused before anything is written."""

from __future__ import annotations

import signal

import pytest

from harness.errors import InputError
from harness.results.record import Result
from harness.results.store import open_store
from harness.session.app import (
    SessionObserver,
    SessionRequest,
    planned_forecast,
    prepare_session,
    run_session,
)
from harness.session.interrupt import Interrupted
from harness.session.request import Resumed


class Recorder(SessionObserver):
    """Keeps what the session tells it; with `stop_after`, interrupts the session once that many runs ended."""

    def __init__(self, stop_after: int | None = None):
        self.notices, self.started, self.runs, self.finished, self.events = [], [], [], [], []
        self.stop_after = stop_after

    def notice(self, text):
        self.notices.append(text)

    def session_started(self, started):
        self.started.append(started)

    def run_started(self, i, n, spec):
        self.runs.append((i, n, spec.run_key))

    def run_progress(self, spec, event):
        self.events.append(event["phase"])

    def run_finished(self, i, n, result):
        self.finished.append(result)
        if self.stop_after is not None and len(self.finished) >= self.stop_after:
            raise Interrupted(signal.SIGINT)


def _scenario(write_scenario, runs: int) -> str:
    return write_scenario({
        "name": "app", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": 1},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": list(range(1, runs + 1))},
        "options": {"fake": {"action": "ok"}},
    })


def test_a_session_runs_from_python_and_its_records_are_typed(tmp_path, fake_backend, write_scenario):
    db = str(tmp_path / "app.db")
    request = SessionRequest(scenario_file=_scenario(write_scenario, 2), store_path=db)
    seen = Recorder()
    prepared = prepare_session(request, seen)
    assert len(prepared.plan) == 2 and not prepared.capacity_mode and prepared.resumed is None
    assert planned_forecast(prepared).runs == 2 and not (tmp_path / "app.db").exists()  # nothing written yet
    finished = run_session(prepared, seen)
    assert finished.exit_code == 0 and finished.state == "finished"
    assert all(isinstance(r, Result) and r.status == "ok" for r in finished.records)
    assert [i for i, _, _ in seen.runs] == [1, 2] and seen.finished == finished.records
    assert seen.started[0].session_id == prepared.session_id and seen.started[0].runs == 2
    assert "block" in seen.events
    with open_store(db, readonly=True) as store:
        assert {r.run_id for r in store.results()} == {r.run_id for r in finished.records}
        assert store.sessions()[0].state == "finished"


def test_an_interrupted_session_is_resumed_from_python(tmp_path, fake_backend, write_scenario):
    db = str(tmp_path / "app.db")
    first = run_session(prepare_session(SessionRequest(scenario_file=_scenario(write_scenario, 3), store_path=db)),
                        Recorder(stop_after=1))
    assert first.state == "interrupted" and first.exit_code == 128 + signal.SIGINT and len(first.records) == 1
    resumed = prepare_session(SessionRequest(resume=first.session_id[:8], store_path=db))
    assert resumed.session_id == first.session_id and resumed.resumed == Resumed(2, 3, "run(s)")
    done = run_session(resumed, Recorder())
    assert done.exit_code == 0 and len(done.records) == 2
    with open_store(db, readonly=True) as store:
        rows = store.results()
        assert store.sessions()[0].state == "finished"
    assert len(rows) == 3 and len({r.run_key for r in rows}) == 3  # each planned run once


@pytest.mark.parametrize("fields, flag", [
    ({"scenario_file": "quickstart", "resume": "abc"}, "--resume"),
    ({}, "SCENARIO_FILE"),
    ({"scenario_file": "quickstart", "memory_limit": "1MiB"}, "--memory-limit"),
    ({"scenario_file": "quickstart", "timeout": -1.0}, "--timeout"),
    ({"resume": "nosuch"}, "--store"),
    ({"scenario_file": "quickstart", "capacity": {"start": 4}}, "--capacity-start"),
])
def test_a_request_is_refused_before_anything_is_written(tmp_path, monkeypatch, fields, flag):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as refused:
        prepare_session(SessionRequest(store_path=str(tmp_path / "never.db"), **fields))
    assert refused.value.field == flag
    assert not (tmp_path / "never.db").exists()


def test_a_capacity_search_runs_from_python(tmp_path, fake_backend, write_scenario):
    path = write_scenario({
        "name": "cap", "workload": "resnet50_train", "params": {"batch_size": 2, "image_size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 1, "timeout_s": 120, "processes": 1},
        "backends": ["fake"], "devices": ["cpu"], "options": {"fake": {"action": "oom_above", "limit": 9}},
    })
    request = SessionRequest(scenario_file=path, store_path=str(tmp_path / "cap.db"), find_max_batch=True,
                             capacity={"start": 2, "limit": 64})
    prepared = prepare_session(request)
    assert prepared.capacity_mode and prepared.groups[0][0].start == 2
    finished = run_session(prepared, Recorder())
    (record,) = finished.records
    assert finished.exit_code == 0 and record.metric == "max_batch_size" and record.median == 9
    assert record.checks.first_failing_batch_size == 10
