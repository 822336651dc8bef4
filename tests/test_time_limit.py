"""--time-limit: a session starts a run only while the time earlier runs say it takes fits in what is left, stops
cleanly (exit 75, state interrupted, nothing cut off) and `--resume` goes on; bad values exit 2."""

from __future__ import annotations

import pytest

from harness.errors import InputError
from harness.results.record import Result, utc_now
from harness.results.store import open_store
from harness.session.app import (
    EXIT_TIME_LIMIT,
    SessionRequest,
    prepare_session,
)
from harness.session.forecast import Durations, expected_duration
from harness.session.limits import TimeLimit, parse_time_limit
from harness.session.runner import Runner


@pytest.mark.parametrize("text, seconds", [
    ("540", 540.0), (" 2.5 ", 2.5), ("540s", 540.0), ("9m", 540.0), ("1h30m", 5400.0), ("1H", 3600.0),
    ("1:30", 90.0), ("01:00:00", 3600.0),
])
def test_a_time_limit_is_read_in_seconds(text, seconds):
    assert parse_time_limit(text) == seconds
    assert parse_time_limit(None) is None


@pytest.mark.parametrize("text", ["0", "-5", "nan", "inf", "abc", "", "1m1m", "8d", "700000", "1:75", "9 m"])
def test_a_nonsense_time_limit_is_refused_naming_the_flag(text):
    with pytest.raises(InputError) as refused:
        parse_time_limit(text)
    assert refused.value.field == "--time-limit" and "expected a duration" in str(refused.value)


def _scenario(write_scenario, runs: int, action: str = "ok") -> str:
    return write_scenario({
        "name": "limit", "workload": "gemm", "params": {"size": 16},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": 1},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": list(range(1, runs + 1))},
        "options": {"fake": {"action": action}},
    })


def _ok(spec, seconds: float) -> Result:
    return Result.planned(spec).updated(status="ok", duration_s=seconds, started_at=utc_now(), median=1.0)


def test_durations_take_the_sessions_records_in_once_each(tmp_path, fake_backend, write_scenario):
    # the index a --time-limit asks before every run: built once from the store, the session's records added as
    # they come; a record added twice (the runner passes all records so far each time) counts once
    plan = prepare_session(SessionRequest(scenario_file=_scenario(write_scenario, 2),
                                          store_path=str(tmp_path / "s.db"))).plan
    stored = [_ok(plan[0], 8.0)]
    done = [_ok(plan[0], 20.0).updated(run_id="a"), _ok(plan[0], 11.0).updated(run_id="b")]
    durations = Durations(stored)
    assert durations.expected(plan[0]) == (8.0, "the median of 1 earlier run(s) of its configuration")
    durations.add(done[:1])
    durations.add(done)
    assert durations.expected(plan[0]) == expected_duration(plan[0], stored + done)
    assert durations.expected(plan[0]) == (11.0, "the median of 3 earlier run(s) of its configuration")
    assert durations.expected(plan[1]) == (20.0, "the longest of 3 earlier run(s) of fake, gemm, execution eager")


def test_a_run_starts_only_while_its_expected_time_fits_what_is_left(tmp_path, fake_backend, write_scenario):
    plan = prepare_session(SessionRequest(scenario_file=_scenario(write_scenario, 4),
                                          store_path=str(tmp_path / "s.db"))).plan
    earlier = [_ok(plan[0], 8.0), _ok(plan[0], 12.0)]  # the store's: batch 1 took 8 and 12 s
    assert expected_duration(plan[0], earlier) == (10.0, "the median of 2 earlier run(s) of its configuration")
    # batch 2 never ran: the longest run of the same backend, workload and execution answers
    assert expected_duration(plan[1], earlier) == (12.0, "the longest of 2 earlier run(s) of fake, gemm, execution eager")
    assert expected_duration(plan[1], []) is None
    now = [0.0]
    ran = []

    def execute(spec):
        ran.append(spec.run_key)
        now[0] += 12.0
        return _ok(spec, 12.0)

    with open_store(str(tmp_path / "s.db")) as store:
        limit = TimeLimit(30.0, lambda spec, done: expected_duration(spec, earlier + done), clock=lambda: now[0])
        runner = Runner(store, time_limit=limit)
        runner.execute = execute
        outcome = runner.run(plan)
    # run 1 (10 s expected, 30 left) and run 2 (12 s, 18 left) start; run 3 (12 s, 6 left) does not
    assert ran == [plan[0].run_key, plan[1].run_key] and len(outcome.records) == 2
    stop = outcome.time_limit
    assert stop.index == 3 and stop.spec is plan[2] and stop.expected_s == 12.0 and stop.left_s == pytest.approx(6.0)
    assert outcome.interrupted is None


def test_a_run_with_nothing_to_go_by_starts_while_time_is_left(tmp_path, fake_backend, write_scenario):
    plan = prepare_session(SessionRequest(scenario_file=_scenario(write_scenario, 3),
                                          store_path=str(tmp_path / "s.db"))).plan
    now = [0.0]

    def execute(spec):
        now[0] += 5.0
        return _ok(spec, 5.0)

    with open_store(str(tmp_path / "s.db")) as store:
        runner = Runner(store, time_limit=TimeLimit(7.0, lambda spec, done: None, clock=lambda: now[0]))
        runner.execute = execute
        outcome = runner.run(plan)
    assert len(outcome.records) == 2 and outcome.time_limit.index == 3
    assert outcome.time_limit.basis == "no time left" and outcome.time_limit.expected_s is None


def test_a_session_stopped_by_its_time_limit_exits_75_and_resumes(tmp_path, fake_backend, write_scenario, harness_cli):
    db = str(tmp_path / "s.db")
    path = _scenario(write_scenario, 2)
    code, _, err = harness_cli("run", path, "--store", db, "-q")
    assert code == 0, err
    # every configuration ran before and took longer than a 0.01 s limit: nothing starts, nothing is written
    code, _, err = harness_cli("run", path, "--store", db, "--time-limit", "0.01")
    assert code == EXIT_TIME_LIMIT, err
    assert "time limit (0.01 s) reached: 0 run(s) finished" in err
    assert "run 1 (" in err and "earlier run(s) of its configuration" in err
    resume = err.split("Go on with: ")[1].split()
    with open_store(db, readonly=True) as store:
        sessions = store.sessions()
        assert len(store.results()) == 2 and sessions[-1].state == "interrupted"
    assert resume[:3] == ["harness", "run", "--resume"] and resume[3] == sessions[-1].session_id
    code, _, err = harness_cli("run", "--resume", resume[3], "--store", db, "--time-limit", "10m", "-q")
    assert code == 0, err
    with open_store(db, readonly=True) as store:
        assert len(store.results()) == 4 and store.sessions()[-1].state == "finished"
    code, out, _ = harness_cli("run", path, "--store", db, "--time-limit", "9m", "--dry-run")
    assert code == 0 and "time limit: 9 min from the session's start" in out


@pytest.mark.parametrize("extra, says", [
    (["--time-limit", "0"], "expected a duration"),
    (["--time-limit", "soon"], "expected a duration"),
    (["--time-limit", "9m", "--executor", "slurm"], "--slurm-time"),
    (["--time-limit", "9m", "--find-max-batch"], "capacity search"),
])
def test_a_time_limit_it_cannot_keep_exits_2_before_anything_is_written(tmp_path, fake_backend, write_scenario,
                                                                       harness_cli, extra, says):
    db = tmp_path / "never.db"
    code, _, err = harness_cli("run", _scenario(write_scenario, 1), "--store", str(db), *extra)
    assert code == 2 and "--time-limit" in err and says in err
    assert "Traceback" not in err and not db.exists()
