"""Verdicts that hold: processes are the samples, and a verdict needs enough processes, p < alpha and a
minimum effect; without one, a row is no regression.

The simulations are seeded: each test gives the same answer on every run and in both eras.
"""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.results.compare import (
    ALPHA,
    EQUIVALENT,
    FASTER,
    INCONCLUSIVE,
    MIN_EFFECT_PCT,
    SAME,
    SLOWER,
    compare,
    display_rows,
    is_difference,
)
from harness.timing import stats
from harness.timing.settings import Measure
from tests.test_compare import processes, store_records

#: the processes a side gets at the defaults (`processes: auto` plans its least, then adds where the CI asks)
DEFAULT_PROCESSES = Measure().process_bounds()[0]


def process_record(mean, backend="torch", *, rng, within=0.01, blocks=5, options=None, **params):
    """A light ok gemm record of one process: `blocks` timed blocks `within` apart around `mean`."""
    return {
        "status": "ok", "workload": "gemm", "scenario": "sim", "metric": "tflops", "unit": "TFLOP/s",
        "backend": backend, "framework_version": "1", "device": "cpu", "device_name": "cpu",
        "params": {"size": 64, **params}, "options": dict(options or {}),
        "samples": [float(x) for x in mean * (1 + within * rng.standard_normal(blocks))],
    }


def two_sides(seed, change, n=DEFAULT_PROCESSES, between=0.02, within=0.01):
    """n processes of torch and n of tensorflow; tensorflow's true mean is `change` away. Each process
    draws its own mean (`between` apart: what separate processes differ by), then its blocks."""
    rng = np.random.default_rng(seed)
    records = []
    for backend, scale in (("torch", 1.0), ("tensorflow", 1.0 + change)):
        for _ in range(n):
            records.append(process_record(100.0 * scale * (1 + between * rng.standard_normal()), backend,
                                          rng=rng, within=within))
    return records


def verdicts(change, seeds, **kwargs):
    options = {k: kwargs.pop(k) for k in ("min_effect",) if k in kwargs}
    return [compare(two_sides(seed, change, **kwargs), ["backend"], baseline="torch", **options).iloc[0]["verdict"]
            for seed in range(seeds)]


# ---------------------------------------------------------------- A/A and a real 10%
@pytest.mark.parametrize("between", [0.002, 0.02])  # an H200 between sessions; a busy CPU between processes
def test_aa_comparisons_give_no_verdict_at_the_defaults(between):
    found = verdicts(0.0, 300, between=between)
    rate = sum(is_difference(v) for v in found) / len(found)
    assert rate <= ALPHA
    # 4 a side: never inconclusive; at an H200's spread the CI lies within 2%: "same within 2%"
    assert all(v.startswith((SAME, EQUIVALENT)) or is_difference(v) for v in found)
    if between < 0.005:
        assert sum(v == "same within 2%" for v in found) / len(found) >= 0.9


def test_aa_false_positive_rate_stays_under_alpha_without_the_minimum_effect():
    # the test alone, no effect floor to hide behind: at most alpha of A/A pairs are called different
    found = verdicts(0.0, 300, min_effect=0.0)
    rate = sum(is_difference(v) for v in found) / len(found)
    assert 0 < rate <= ALPHA


def test_pooling_blocks_as_samples_would_call_many_aa_pairs_different():
    # what compare did before: every block a sample. Blocks of one process share its state, so two
    # draws of the same configuration differ "significantly" far more often than alpha.
    hits = 0
    for seed in range(300):
        records = two_sides(seed, 0.0)
        base = [x for r in records if r["backend"] == "torch" for x in r["samples"]]
        value = [x for r in records if r["backend"] == "tensorflow" for x in r["samples"]]
        hits += stats.mann_whitney(value, base) < ALPHA
    assert hits / 300 > 0.2


@pytest.mark.parametrize("change, word", [(0.10, FASTER), (-0.10, SLOWER)])
def test_a_real_10pct_difference_is_found_at_the_default_number_of_processes(change, word):
    assert DEFAULT_PROCESSES >= stats.processes_needed(ALPHA)
    found = verdicts(change, 200)
    assert sum(v == word for v in found) / len(found) >= 0.95


# ---------------------------------------------------------------- too few processes, minimum effect
def test_three_processes_a_side_are_inconclusive_however_large_the_difference():
    # 1.96x, as a bf16 GEMM measured on an H200: with 3 a side no p below 0.1 exists, and the verdict says so
    rng = np.random.default_rng(1)
    records = ([process_record(100.0, rng=rng) for _ in range(3)]
               + [process_record(196.0, "tensorflow", rng=rng) for _ in range(3)])
    row = compare(records, ["backend"]).iloc[0]
    assert row["ratio"] == pytest.approx(1.96, rel=0.02)
    assert row["p_value"] == pytest.approx(0.1)
    assert row["verdict"] == "inconclusive: 3 processes per side cannot reach p < 0.05; use at least 4"
    assert not is_difference(row["verdict"])


def test_unequal_sides_say_how_many_each_needs():
    rng = np.random.default_rng(2)
    records = [process_record(100.0, rng=rng)] + [process_record(120.0, "tensorflow", rng=rng) for _ in range(5)]
    row = compare(records, ["backend"]).iloc[0]
    assert row["verdict"] == "inconclusive: 1 against 5 processes cannot reach p < 0.05; use at least 4 per side"
    assert row["ci_basis"] is None or row["ci_basis"] != row["ci_basis"]  # no between-process CI with one process


def test_one_process_a_side_shows_the_ratio_with_a_within_process_ci_and_no_p():
    rng = np.random.default_rng(3)
    records = [process_record(100.0, rng=rng), process_record(150.0, "tensorflow", rng=rng)]
    table = compare(records, ["backend"])
    row = table.iloc[0]
    assert row["ratio"] == pytest.approx(1.5, rel=0.03)
    assert row["ci_basis"] == "within-process" and row["ratio_ci_low"] < row["ratio"] < row["ratio_ci_high"]
    assert row["p_value"] is None or row["p_value"] != row["p_value"]
    assert row["verdict"] == "inconclusive: 1 process per side cannot reach p < 0.05; use at least 4"
    _, shown = display_rows(table)
    assert shown[0]["ratio [95% CI]"].endswith("within-process")
    assert shown[0]["processes"] == "1 vs 1"


def test_a_significant_change_under_the_minimum_effect_is_the_same_within_it_or_no_difference():
    # 1% apart, processes 0.1% apart: Mann-Whitney is sure, but 1% is under the 2% default and the whole CI
    # of the ratio lies within 2% of 1: the two are the same within 2%
    rng = np.random.default_rng(4)
    records = ([process_record(100.0 * (1 + 0.001 * rng.standard_normal()), rng=rng, within=0.001) for _ in range(5)]
               + [process_record(101.0 * (1 + 0.001 * rng.standard_normal()), "tensorflow", rng=rng, within=0.001)
                  for _ in range(5)])
    row = compare(records, ["backend"]).iloc[0]
    assert MIN_EFFECT_PCT == 2.0
    assert row["p_value"] < ALPHA and 1.0 < row["ratio_ci_low"] and row["ratio_ci_high"] < 1.02
    assert row["verdict"] == "same within 2%" and not is_difference(row["verdict"])
    assert compare(records, ["backend"], min_effect=0.5).iloc[0]["verdict"] == FASTER
    # 1.7% apart, processes 0.6% apart: significant, under the minimum effect, but the CI reaches past 2%
    rng = np.random.default_rng(7)
    records = ([process_record(100.0 * (1 + 0.006 * rng.standard_normal()), rng=rng, within=0.001) for _ in range(5)]
               + [process_record(101.7 * (1 + 0.006 * rng.standard_normal()), "tensorflow", rng=rng, within=0.001)
                  for _ in range(5)])
    row = compare(records, ["backend"]).iloc[0]
    assert row["p_value"] < ALPHA and row["ratio_ci_high"] > 1.02 and abs(row["change_pct"]) < 2.0
    assert row["verdict"] == f"{SAME}: +{row['change_pct']:.1f}% is under the 2% minimum effect"


def test_min_effect_is_a_command_option(tmp_path):
    path = store_records(tmp_path / "h.db", processes(1000.0, seed=1, spread=0.001, noise=0.001)
                         + processes(1010.0, backend="tensorflow", seed=2, spread=0.001, noise=0.001))
    run = lambda *a: CliRunner().invoke(main, ["compare", "--store", path, "--by", "backend", "--format", "json", *a])  # noqa: E731
    assert json.loads(run().output)[0]["verdict"] == "same within 2%"
    assert json.loads(run("--min-effect", "0.5").output)[0]["verdict"] == FASTER
    assert json.loads(run("--min-effect", "0").output)[0]["verdict"] == FASTER
    bad = run("--min-effect", "-1")
    assert bad.exit_code == 2 and "--min-effect" in bad.output


def test_min_p_value_is_the_exact_mann_whitney_floor():
    assert stats.min_p_value(3, 3) == pytest.approx(0.1)
    assert stats.min_p_value(4, 4) == pytest.approx(2 / 70)
    assert stats.min_p_value(5, 5) == pytest.approx(2 / 252)
    assert stats.min_p_value(1, 1) == 1.0
    assert stats.processes_needed(0.05) == 4 and stats.processes_needed(0.01) == 5
    # scipy's p for 5 against 5 that do not overlap is that floor
    assert stats.mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)


def test_inconclusive_and_no_difference_are_not_regressions():
    from harness.results.compare import fail_if_slower

    few = compare(processes(1000.0, n=2, seed=1) + processes(500.0, n=2, backend="tensorflow", seed=2), ["backend"])
    assert few.iloc[0]["verdict"].startswith(INCONCLUSIVE)
    assert fail_if_slower(few, 5) == []


def test_sides_measured_on_different_machines_say_so():
    rng = np.random.default_rng(8)
    records = []
    for backend, host in (("torch", "node-a"), ("tensorflow", "node-b")):
        for _ in range(4):
            record = process_record(100.0, backend, rng=rng)
            record["env"] = {"hostname": host}
            records.append(record)
    row = compare(records, ["backend"]).iloc[0]
    assert "ran on different machines (node-a against node-b)" in row["warnings"]
    same = [{**r, "env": {"hostname": "node-a"}} for r in records]
    assert "different machines" not in compare(same, ["backend"]).iloc[0]["warnings"]
    # a job's Slurm node names its machine
    slurm = [{**r, "slurm": {"node": "gpu-7"}} for r in same]
    slurm[0] = {**slurm[0], "slurm": {"node": "gpu-3"}}
    assert "gpu-3, gpu-7 against gpu-7" in compare(slurm, ["backend"]).iloc[0]["warnings"]
