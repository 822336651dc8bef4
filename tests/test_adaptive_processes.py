"""`measure.processes: auto`: as many processes as the answer needs, without raising the false-verdict rate.

Each simulated comparison runs the session's own rule (harness.session.rounds.wants_another) on each side
and judges the sides with compare's own rule (harness.results.compare.verdicts.judge). The spreads are
between-process coefficients of variation: 0.1-0.6% is what H200 stores record for ResNet-50 and GEMM
(the largest, 0.57%, TensorFlow ResNet-50 fp32), 2-3% a busy CPU. Seeded: the same answer in every run
and in both eras.
"""

import numpy as np
import pytest

from harness.results.compare import EQUIVALENT, FASTER, SLOWER, is_difference
from harness.results.compare.verdicts import judge
from harness.session.rounds import AdaptiveRounds, wants_another
from harness.timing.settings import Measure

AUTO = Measure()
LEAST, MOST = AUTO.process_bounds()
#: the largest between-process CV in the H200 stores
GPU_SPREAD = 0.006


def draw(rng, mean, spread, tails):
    """One process's median: normal around `mean`, or Student-t with 3 degrees of freedom (outliers)."""
    z = rng.standard_t(3) / np.sqrt(3) if tails else rng.standard_normal()
    return float(mean * (1 + spread * z))


def adaptive_pair(rng, change, spread, tails=False, measure=AUTO):
    """Both sides of one comparison as a session with `processes: auto` gathers them: the least each, then a
    round at a time, one more process for each side whose own rule asks for it."""
    means = (100.0, 100.0 * (1.0 + change))
    least, _ = measure.process_bounds()
    sides = [[draw(rng, mean, spread, tails) for _ in range(least)] for mean in means]
    while True:
        wanting = [i for i, values in enumerate(sides) if wants_another(values, len(values), measure)]
        if not wanting:
            return sides
        for i in wanting:
            sides[i].append(draw(rng, means[i], spread, tails))


def verdicts(change, spread, trials=400, seed=0, tails=False, **judged):
    rng = np.random.default_rng(seed)
    out, sizes = [], []
    for _ in range(trials):
        base, value = adaptive_pair(rng, change, spread, tails)
        out.append(judge(base, value, **judged).verdict)
        sizes += [len(base), len(value)]
    return out, sizes


# ---------------------------------------------------------------- the rule
def test_auto_runs_the_least_a_verdict_needs_then_more_only_while_the_ci_is_wide():
    assert (LEAST, MOST) == (4, 10) and AUTO.processes == "auto" and AUTO.process_ci_pct == 1.0
    tight = [100.0, 100.1, 99.9, 100.05]
    wide = [100.0, 101.5, 98.5, 100.5]  # a CI of about +/-1.5%: a few more processes bring it within 1%
    assert not wants_another(tight, 4, AUTO)
    assert wants_another(wide, 4, AUTO)
    assert wants_another(tight[:3], 3, AUTO)  # under the least
    assert not wants_another(wide + [99.0] * 6, 10, AUTO)  # at the most
    assert not wants_another([100.0], 4, AUTO)  # a configuration whose processes fail is not chased
    assert not wants_another(wide, 4, Measure(processes=4))  # a fixed count is a fixed count
    assert not wants_another(wide, 4, Measure(process_ci_pct=10.0))
    assert wants_another(tight, 4, Measure(min_processes=6))
    # processes 20% apart would need about 1,600 of them for a 1% CI: more than REACH x the most, so no more
    assert not wants_another([100.0, 130.0, 75.0, 110.0], 4, AUTO)


def test_added_rounds_go_to_the_configurations_that_ask_shuffled_and_within_the_limit():
    from harness.results.record import Result
    from harness.seam.runspec import RunSpec

    def spec(key):
        return RunSpec(run_id=key, session_id="s", run_key=key, scenario="p", workload="gemm", backend="torch",
                       device="cpu", params={"size": 64}, measure=AUTO, seed=3)

    specs = [spec(k) for k in "abc"]
    rounds = AdaptiveRounds.of(specs * LEAST, planned=3 * LEAST, limit=3 * LEAST + 1)
    results = [Result(run_id=f"{k}{i}", run_key=k, status="ok", median=m)
               for k, values in (("a", [100, 100.1, 99.9, 100]), ("b", [100, 101.5, 98.5, 100.5]),
                                 ("c", [100, 102, 98.5, 99]))
               for i, m in enumerate(values)]
    first = rounds.next_round(results)
    assert len(first) == 1 and first[0].run_key in "bc" and first[0].replicate == LEAST  # the limit: one more run
    assert rounds.next_round(results) == []  # the limit is reached
    unlimited = AdaptiveRounds.of(specs, planned=3 * LEAST)
    assert sorted(s.run_key for s in unlimited.next_round(results)) == ["b", "c"]
    assert AdaptiveRounds.of([spec("a").__class__(**{**spec("a").__dict__, "measure": {"processes": 4}})],
                             planned=4) is None


# ---------------------------------------------------------------- A/A: no more false verdicts than alpha
@pytest.mark.parametrize("spread, tails", [(0.002, False), (GPU_SPREAD, False), (0.01, False), (0.03, False),
                                           (0.01, True)])
def test_adaptive_processes_keep_aa_false_verdicts_at_or_under_five_percent(spread, tails):
    found, sizes = verdicts(0.0, spread, tails=tails)
    assert sum(is_difference(v) for v in found) / len(found) <= 0.05
    assert max(sizes) <= MOST and min(sizes) >= LEAST


def test_without_the_minimum_effect_the_test_alone_stays_at_or_under_five_percent():
    found, sizes = verdicts(0.0, 0.02, min_effect=0.0, seed=1)
    assert sum(is_difference(v) for v in found) / len(found) <= 0.05
    assert np.mean(sizes) > LEAST + 2  # a 2% spread needs more than the least for a 1% CI: the rule added rounds


def test_a_configuration_whose_processes_differ_by_a_quarter_stops_at_the_least():
    # as TensorFlow's tf.function GEMM 4096 in bf16 did on an H200: processes 20-26% apart
    found, sizes = verdicts(0.0, 0.25, seed=6)
    assert np.mean(sizes) < LEAST + 0.1 and sum(is_difference(v) for v in found) / len(found) <= 0.05


def test_at_the_gpu_spread_aa_pairs_read_same_within_two_percent_at_the_least():
    found, sizes = verdicts(0.0, GPU_SPREAD, seed=2)
    assert sum(v == f"{EQUIVALENT} 2%" for v in found) / len(found) >= 0.9
    assert np.mean(sizes) < LEAST + 0.5  # an H200's spread rarely needs more than the least


# ---------------------------------------------------------------- a real 3% difference
@pytest.mark.parametrize("change, word", [(0.03, FASTER), (-0.03, SLOWER)])
def test_a_three_percent_difference_is_found_at_the_gpu_spread(change, word):
    found, _ = verdicts(change, GPU_SPREAD, seed=3)
    assert sum(v == word for v in found) / len(found) >= 0.95


def test_a_three_percent_difference_is_mostly_found_at_a_one_percent_spread():
    found, _ = verdicts(0.03, 0.01, seed=4)
    assert sum(v == FASTER for v in found) / len(found) >= 0.8


@pytest.mark.parametrize("spread", [0.002, GPU_SPREAD, 0.01, 0.02, 0.03])
def test_a_three_percent_difference_rarely_reads_same_within_two_percent(spread):
    found, _ = verdicts(0.03, spread, seed=5)
    assert sum(v.startswith(EQUIVALENT) for v in found) / len(found) <= 0.05


# ---------------------------------------------------------------- in a session
def _auto_scenario(write_scenario, ci_pct: float) -> str:
    return write_scenario({
        "name": "auto", "workload": "gemm", "params": {"size": 32},
        "measure": {"warmup": 0, "steps": 1, "repeats": 2, "timeout_s": 120, "processes": "auto",
                    "min_processes": 2, "max_processes": 4, "process_ci_pct": ci_pct},
        "backends": ["fake"], "devices": ["cpu"], "sweep": {"batch": [1, 2]},
        "options": {"fake": {"action": "ok"}},
    })


def _per_configuration(db) -> dict:
    from harness.results.store import open_store

    with open_store(db, readonly=True) as store:
        rows = store.results()
    counts: dict = {}
    for r in rows:
        counts.setdefault(r.run_key, []).append(r.replicate)
    return {k: sorted(v) for k, v in counts.items()}


@pytest.mark.parametrize("ci_pct, processes", [(100.0, [0, 1]), (1e-6, [0, 1, 2, 3])])
def test_a_session_adds_rounds_while_the_ci_over_processes_is_wider_than_asked(
        tmp_path, fake_backend, write_scenario, ci_pct, processes, monkeypatch):
    from harness.session.app import SessionRequest, prepare_session, run_session

    monkeypatch.setattr("harness.session.rounds.REACH", 1e30)  # a target no spread can reach is still chased

    db = str(tmp_path / "auto.db")
    prepared = prepare_session(SessionRequest(scenario_file=_auto_scenario(write_scenario, ci_pct), store_path=db))
    assert len(prepared.plan) == 2 * 2  # the least, planned; the rest is added as results arrive
    finished = run_session(prepared)
    assert finished.exit_code == 0 and all(r.status == "ok" for r in finished.records)
    counts = _per_configuration(db)
    assert len(counts) == 2 and all(v == processes for v in counts.values())
    order = [r.run_key for r in finished.records]
    if len(processes) > 2:  # added rounds interleave the configurations too: no configuration's runs bunched
        assert order[4] != order[5] and order[6] != order[7]


def test_a_resumed_session_goes_on_adding_rounds_from_its_stored_results(tmp_path, fake_backend, write_scenario,
                                                                          monkeypatch):
    from harness.session.app import SessionRequest, prepare_session, run_session
    from tests.test_app import Recorder

    monkeypatch.setattr("harness.session.rounds.REACH", 1e30)

    db = str(tmp_path / "auto.db")
    first = run_session(prepare_session(SessionRequest(scenario_file=_auto_scenario(write_scenario, 1e-6),
                                                       store_path=db)), Recorder(stop_after=5))
    assert first.state == "interrupted" and len(first.records) == 5  # the planned 4 and one added
    resumed = prepare_session(SessionRequest(resume=first.session_id, store_path=db))
    assert resumed.plan == []  # every planned run has its result: what is left is added rounds
    done = run_session(resumed, Recorder())
    assert done.exit_code == 0 and len(done.records) == 3
    assert all(v == [0, 1, 2, 3] for v in _per_configuration(db).values())


# ---------------------------------------------------------------- what validate and --dry-run say; bad values
def test_validate_and_dry_run_say_what_auto_will_do(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    out = CliRunner().invoke(main, ["validate", "quickstart"])
    assert out.exit_code == 0
    assert "2 configuration(s) x 4-10 process(es) = 8-20 run(s)" in out.output
    assert "steps auto (blocks >= 0.2 s)" in out.output and "processes auto 4-10" in out.output
    dry = CliRunner().invoke(main, ["run", "quickstart", "--dry-run", "--store", str(tmp_path / "d.db")])
    assert dry.exit_code == 0 and "processes auto: these 8 run(s)" in dry.output and "at most 20 in all" in dry.output
    fixed = CliRunner().invoke(main, ["validate", "quickstart", "--set", "measure.processes=3", "--set",
                                      "measure.steps=7"])
    assert "2 configuration(s) x 3 process(es) = 6 run(s)" in fixed.output
    assert "7 steps x 5 blocks; 3 process(es)" in fixed.output


@pytest.mark.parametrize("field, value", [
    ("steps", "0"), ("steps", "-3"), ("steps", ".nan"), ("steps", ".inf"), ("steps", "many"), ("steps", "2.5"),
    ("steps", "Auto"), ("steps", "true"), ("processes", "0"), ("processes", "101"), ("processes", ".nan"),
    ("min_block_s", "0"), ("min_block_s", ".nan"), ("min_block_s", ".inf"), ("min_block_s", "soon"),
    ("max_block_steps", "0"), ("process_ci_pct", "-1"), ("process_ci_pct", ".nan"), ("process_ci_pct", ".inf"),
    ("min_processes", "1"), ("max_processes", ".inf"), ("max_processes", "many"), ("compile_cache", "hot"),
])
def test_nonsense_in_the_new_measure_fields_is_refused_naming_the_field(tmp_path, field, value):
    from click.testing import CliRunner

    from harness.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(f"name: q\nworkload: gemm\nparams: {{size: 64}}\nbackends: [torch]\ndevices: [cpu]\n"
                    f"measure: {{{field}: {value}}}\n", encoding="utf-8")
    for args in (["validate", str(path)], ["run", str(path), "--store", str(tmp_path / "s.db")]):
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 2 and f"measure.{field}" in out.output and "Traceback" not in out.output
    assert not (tmp_path / "s.db").exists()
