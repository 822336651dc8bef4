"""`harness tune`: the race's rule, its error rate by simulation, its replay on the stored H200 sweeps against
the exhaustive answer, the race rebuilt from a session's records, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.results.compare import load_records
from harness.results.record import Result
from harness.seam.runspec import RunSpec
from harness.session.app import SessionRequest
from harness.session.tune.live import RaceRounds
from harness.session.tune.race import Candidate, RaceRules, run_race, stand
from harness.session.tune.replay import replay_store
from harness.session.tune.simulation import simulate
from harness.session.tune.tuning import TuneSettings, prepare_tune, run_tune

DATA = Path(__file__).resolve().parents[1] / "docs" / "data"
#: The exhaustive frameworks sweeps on the H200 (every configuration at the file's processes): ResNet-50 in
#: three precisions (2026-12-02; amp_bf16 again on 2026-12-03 in two parts) and GEMM 4096 in four.
SWEEPS = ["h200-2026-12-02-frameworks-amp_bf16.db", "h200-2026-12-02-frameworks-amp_fp16.db",
          "h200-2026-12-02-frameworks-tf32.db", "h200-2026-12-03-frameworks-amp_bf16-compiled-eager.db",
          "h200-2026-12-03-frameworks-amp_bf16-graph-cuda_graph.db", "h200-2026-12-02-frameworks-gemm-bf16-fp16.db",
          "h200-2026-12-02-frameworks-gemm-fp32-tf32.db", "h200-2026-12-03-frameworks-gemm-fp32-tf32.db"]


def _one(standings, group="f"):
    return next(s for s in standings if s.group == group)


def test_a_configuration_far_behind_after_one_process_is_dropped_and_a_close_one_kept():
    s = _one(stand([Candidate("a", "f", (100.0,)), Candidate("b", "f", (40.0,)), Candidate("c", "f", (90.0,))],
                   RaceRules()))
    assert s.leader == "a"
    assert set(s.dropped) == {"b"} and "out of reach after 1 of its processes" in s.dropped["b"]
    assert s.survivors == ("a", "c") and set(s.measure_next) == {"a", "c"} and not s.decided


def test_the_prior_cv_decides_what_one_process_can_rule_out():
    pair = [Candidate("a", "f", (100.0,)), Candidate("b", "f", (70.0,))]
    assert "b" not in _one(stand(pair, RaceRules(prior_cv=0.10))).dropped
    assert "b" in _one(stand(pair, RaceRules(prior_cv=0.02))).dropped
    # a configuration's own prior (its kind's history in the store) wins over the rules'
    assert "b" in _one(stand([pair[0], Candidate("b", "f", (70.0,), prior_cv=0.02)], RaceRules(prior_cv=0.10))).dropped


def test_compare_verdict_drops_the_slower_and_decides_the_race():
    s = _one(stand([Candidate("a", "f", (100.0, 101.0, 99.5, 100.5)), Candidate("b", "f", (95.0, 95.5, 94.8, 95.2))],
                   RaceRules(prior_cv=1.0, floor_cv=0.2)))  # bounds too wide to drop: only the verdict can
    assert s.dropped["b"].startswith("slower than a") and "compare's verdict" in s.dropped["b"]
    assert s.decided and s.measure_next == () and s.undecided == ()


def test_configurations_within_the_minimum_effect_are_a_tie_and_stop_being_measured():
    s = _one(stand([Candidate("a", "f", (100.0, 100.2, 99.9, 100.1)), Candidate("b", "f", (99.8, 99.9, 100.0, 99.7))],
                   RaceRules()))
    assert s.survivors == ("a", "b") and s.pairs[0].verdict == "same within 2%" and s.decided


def test_a_race_at_its_process_limit_says_what_is_undecided():
    noisy = [Candidate("a", "f", (100.0, 80.0, 120.0)), Candidate("b", "f", (98.0, 118.0, 79.0))]
    s = _one(stand(noisy, RaceRules(max_processes=3)))
    assert not s.decided and s.undecided == ("b",) and s.measure_next == ()


def test_lower_is_better_drops_the_slow_one():
    s = _one(stand([Candidate("fast", "f", (1.0,)), Candidate("slow", "f", (3.0,))],
                   RaceRules(higher_is_better=False)))
    assert s.leader == "fast" and "slow" in s.dropped and "lowest plausible" in s.dropped["slow"]


def test_frameworks_race_apart():
    standings = stand([Candidate("t1", "torch", (100.0,)), Candidate("k1", "tf", (10.0,)),
                       Candidate("k2", "tf", (11.0,))], RaceRules())
    assert {s.group: s.leader for s in standings} == {"torch": "t1", "tf": "k2"}
    assert _one(standings, "torch").dropped == {}


def test_run_race_drops_stick_failures_are_dropped_and_leaders_reach_a_verdict():
    truth = {"a": [100.0, 100.3, 99.8, 100.1, 100.2], "b": [50.0] * 5, "c": [float("nan")], "d": [99.9, 100.2,
                                                                                                  100.0, 99.7, 100.1]}
    asked = []

    def measure(names):
        asked.append(sorted(names))
        return {n: truth[n][sum(n in a for a in asked) - 1] for n in names}

    result = run_race([Candidate(n, "f") for n in truth], measure, RaceRules(max_processes=5))
    s = result.standings[0]
    assert asked[0] == ["a", "b", "c", "d"] and all("b" not in a for a in asked[1:])
    assert "gave no value" in s.dropped["c"] and "out of reach" in s.dropped["b"]
    assert s.decided and s.pairs[0].verdict == "same within 2%" and len(result.candidates[s.leader].values) == 4
    assert result.processes == sum(len(a) for a in asked) == 4 + 2 * 3


def test_bad_rules_and_duplicate_names_are_refused():
    with pytest.raises(InputError):
        RaceRules(drop_alpha=0.7)
    with pytest.raises(InputError):
        RaceRules(max_processes=0)
    with pytest.raises(InputError):
        stand([Candidate("a", "f", (1.0,)), Candidate("a", "g", (2.0,))], RaceRules())


def test_simulated_error_rate_is_the_exhaustive_sweeps_at_fewer_processes():
    """Made-up frameworks of 6 configurations (docs/tune.md has the table at 2000 trials): the race picks a
    configuration more than 2% behind the truth no more often than the exhaustive sweep at 4 processes."""
    rate = simulate(30, seed=0)
    assert rate.race_wrong <= rate.exhaustive_wrong + 1
    assert rate.disagree <= 1
    assert rate.race_processes < 0.9 * rate.exhaustive_processes


@pytest.mark.parametrize("store", SWEEPS)
def test_replay_on_the_stored_sweeps_gives_the_exhaustive_answer_with_fewer_processes(store):
    """20 orders of each sweep's processes, with the default prior and with priors from the other sweeps."""
    history = [str(DATA / other) for other in SWEEPS if other != store]
    for replays in (replay_store(str(DATA / store), seeds=20), replay_store(str(DATA / store), seeds=20,
                                                                           history=history)):
        wrong = [(r.seed, r.picks) for r in replays if not r.equal]
        assert wrong == []
        assert all(r.processes < r.exhaustive and r.run_time_s < r.exhaustive_run_time_s for r in replays)


def _spec(key, backend, size, options=None):
    return RunSpec(run_id=key, session_id="s", run_key=key, scenario="t", workload="gemm", backend=backend,
                   device="cpu", params={"size": size}, measure={}, seed=0, options=options or {})


def _record(spec, replicate, value, **extra):
    return Result(**{"run_id": f"{spec.run_key}-{replicate}", "session_id": "s", "run_key": spec.run_key,
                     "workload": "gemm", "backend": spec.backend, "device": "cpu", "params": spec.params,
                     "replicate": replicate, "status": "ok", "median": value, "unit": "TFLOP/s", **extra})


def test_the_race_is_rebuilt_from_a_sessions_records_with_its_drops_and_device_memory():
    big, small, mid = _spec("big", "torch", 256), _spec("small", "torch", 16), _spec("mid", "torch", 128)
    rounds = RaceRounds([big, small, mid], RaceRules(), limits={"big": 4, "small": 4, "mid": 4},
                        max_device_memory=2**30)
    first = [_record(big, 0, 10.0), _record(small, 0, 1.0), _record(mid, 0, 9.0, peak_allocated_bytes=2**31)]
    standings, _ = rounds.standings(first)
    assert set(standings[0].dropped) == {"torch size=16", "torch size=128"}
    assert "more device memory than --max-device-memory" in standings[0].dropped["torch size=128"]
    nxt = rounds.next_round(first)
    assert [(s.run_key, s.replicate) for s in nxt] == [("big", 1)]


def test_what_a_lucky_first_process_put_out_of_reach_comes_back_when_the_leader_falls():
    a, b, c = _spec("a", "torch", 1), _spec("b", "torch", 2), _spec("c", "torch", 3)
    rounds = RaceRounds([a, b, c], RaceRules(prior_cv=0.01), limits={"a": 6, "b": 6, "c": 6})
    first = [_record(a, 0, 100.0), _record(b, 0, 50.0), _record(c, 0, 10.0, status="failed")]
    standings, _ = rounds.standings(first)
    assert "out of reach" in standings[0].dropped["torch size=2"]
    # a's later processes fall under b's one value: b leads again; c's failure stands
    later = first + [_record(a, i, 40.0 + i) for i in range(1, 4)]
    standings, _ = rounds.standings(later)
    assert standings[0].leader == "torch size=2" and set(standings[0].dropped) == {"torch size=3"}
    assert "torch size=2" in standings[0].measure_next


@pytest.mark.parametrize("args, field", [
    (["--metric", "bogus"], "--metric"),
    (["--max-processes", "0"], "--max-processes"),
    (["--max-device-memory", "lots"], "--max-device-memory"),
])
def test_bad_input_exits_2_with_one_line(harness_cli, tmp_path, args, field):
    code, out, err = harness_cli("tune", "quickstart", "--store", "t.db", *args)
    assert code == 2 and err.count("\n") == 1 and field in err and "Traceback" not in err, err
    assert not (tmp_path / "t.db").exists()


def test_resume_needs_the_scenario(harness_cli):
    code, _, err = harness_cli("tune", "--resume", "abc", "--store", "t.db")
    assert code == 2 and err.count("\n") == 1 and "SCENARIO_FILE" in err


def test_tune_on_the_cpu_picks_what_the_stores_records_say_and_keeps_every_process(harness_cli, tmp_path):
    """GEMM 512 against 4 in fp32, torch and TensorFlow (some 100 times apart in TFLOP/s, so that a loaded CPU,
    where torch's GEMM 256 can fall under its GEMM 16, cannot swap them): the race's pick per framework is the
    fastest configuration over every record the store holds (compare's answer), and the dropped one keeps its
    record."""
    from harness.results.compare import fastest_configurations

    store = tmp_path / "tune.db"
    code, out, err = harness_cli("tune", "quickstart", "--store", str(store), "--set", "size=[4, 512]",
                                 "--set", "measure.warmup=1", "--set", "measure.repeats=3", "--max-processes", "2",
                                 "--json", timeout=900)
    assert code == 0, err
    answer = json.loads(out)
    records = load_records(str(store))
    assert answer["cost"]["processes"] == len(records) < answer["cost"]["exhaustive_processes"]
    picks = {f["framework"]: f["best"]["configuration"] for f in answer["frameworks"]}
    assert picks == {"torch": "torch size=512", "tensorflow": "tensorflow size=512"}
    exhaustive = {row["backend"]: row["config"] for row in fastest_configurations(records)}
    assert exhaustive == {"torch": {"size": 512}, "tensorflow": {"size": 512}}
    dropped = [d for f in answer["frameworks"] for d in f["dropped"]]
    assert {d["configuration"] for d in dropped} == {"torch size=4", "tensorflow size=4"}
    assert all(d["processes"] == 1 and d["reason"] for d in dropped)
    assert answer["between_frameworks"][0]["verdict"]


def _fake_space(write_scenario) -> str:
    return write_scenario({
        "name": "space", "workload": "gemm", "params": {"size": 8},
        "measure": {"warmup": 0, "steps": 2, "repeats": 2, "timeout_s": 120, "processes": 4},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"size": [4, 192]},
        "options": {"fake": {"action": "ok"}},
    })


def test_an_interrupted_tuning_session_resumes_from_its_records(tmp_path, fake_backend, write_scenario):
    """Stopped after 3 processes, `--resume` (the scenario given again) runs only what the race still wants:
    every configuration's processes are replicates 0..n-1 once each, and the answer is the one a whole
    session gives."""
    from tests.test_app import Recorder

    scenario, db = _fake_space(write_scenario), str(tmp_path / "tune.db")
    shaped = ("measure.repeats=2",)  # given again with --resume, as `tune` asks: shapes the configurations only
    tuned = prepare_tune(SessionRequest(scenario_file=scenario, store_path=db, overrides=shaped), TuneSettings())
    assert len(tuned.prepared.plan) == 2 and tuned.exhaustive_processes == 8  # one process each; 4 each planned
    first, _ = run_tune(tuned, Recorder(stop_after=3))
    assert first.state == "interrupted"
    again = prepare_tune(SessionRequest(scenario_file=scenario, store_path=db, resume=first.session_id,
                                        overrides=shaped), TuneSettings())
    finished, answer = run_tune(again, Recorder())
    assert finished.exit_code == 0
    best = answer["frameworks"][0]
    assert best["best"]["configuration"] == "fake size=192" and best["decided"]
    assert [d["configuration"] for d in best["dropped"]] == ["fake size=4"]
    replicates: dict = {}
    for r in load_records(db):
        replicates.setdefault(r.run_key, []).append(r.replicate)
    assert sorted(sorted(v) == list(range(len(v))) for v in replicates.values()) == [True, True]
    assert answer["cost"]["processes"] == sum(len(v) for v in replicates.values()) < 8
