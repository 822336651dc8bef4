"""`compare` and `harness compare` on synthetic stored results: planted differences, pooling, exit codes, formats.

Each record is one worker process; a verdict needs several per side (`processes`), so planted
differences are planted in five records a side, as `measure.processes` runs them by default.
"""

import csv
import io
import itertools
import json
import uuid

import numpy as np
import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.errors import InputError
from harness.results.compare import (
    FASTER,
    INCONCLUSIVE,
    SAME,
    SLOWER,
    as_results,
    compare,
    comparison_rows,
    fail_if_slower,
    load_records,
    ok_records,
    rows_of,
    slowdown_pct,
    technique_speedups,
)
from harness.results.record import FIELDS, SCHEMA_VERSION, Result
from harness.results.store import load_results, open_store
from harness.timing import stats

_clock = itertools.count()

RESNET_PARAMS = {
    "model": "resnet50", "batch_size": 64, "image_size": 224, "num_classes": 1000, "precision": "fp32",
    "memory_format": "channels_first", "recompute": "none", "execution": "eager", "grad_accum": 1,
    "lr": 0.01, "momentum": 0.9,
}
GEMM_PARAMS = {"size": 4096, "m": None, "n": None, "k": None, "batch": 1, "precision": "fp32", "execution": "eager"}


def make_record(
    mean=1000.0, *, workload="resnet50_train", backend="torch", device="cuda:0", device_name="NVIDIA H200",
    session="s1", seed=0, noise=0.005, n=20, status="ok", **params,
):
    """A complete result record: samples from a seeded normal around `mean`, statistics filled as the worker does."""
    base = dict(RESNET_PARAMS if workload == "resnet50_train" else GEMM_PARAMS)
    base.update(params)
    record = {name: None for name in FIELDS}
    samples = [float(x) for x in mean * (1 + noise * np.random.default_rng(seed).standard_normal(n))] if status == "ok" else []
    summary = stats.summarize(samples)
    record.update(
        schema_version=SCHEMA_VERSION, run_id=uuid.uuid4().hex, session_id=session, run_key=f"{workload}-{backend}",
        scenario=f"{workload}-test", workload=workload, backend=backend,
        framework_version={"torch": "2.4.0", "tensorflow": "2.16.1"}.get(backend, "1.0"),
        device=device, device_requested=device, device_name=device_name, params=base, api={}, status=status,
        error=None if status == "ok" else "RuntimeError: boom",
        metric="throughput" if workload == "resnet50_train" else "tflops",
        unit="images/s" if workload == "resnet50_train" else "TFLOP/s",
        samples=samples, median=summary.median, iqr=summary.iqr, ci_low=summary.ci_low, ci_high=summary.ci_high,
        cv=summary.cv, warnings=list(summary.warnings) if samples else [], checks={}, timing={}, telemetry={}, env={},
        started_at=f"2025-01-01T00:00:{next(_clock):06d}",
    )
    if status == "ok" and workload == "resnet50_train":
        record["peak_allocated_bytes"] = int(base["batch_size"] * 80e6)
        record["step_time_s"] = base["batch_size"] / summary.median
    if status == "ok" and workload == "gemm":
        record["tflops"] = summary.median
    return record


def processes(mean=1000.0, n=5, *, spread=0.003, seed=0, options=None, **fields):
    """n records (n worker processes) of one configuration: each its own mean, `spread` apart, own blocks."""
    rng = np.random.default_rng(10_000 + seed)
    records = [make_record(mean * (1 + spread * rng.standard_normal()), seed=seed * 100 + i, **fields) for i in range(n)]
    for record in records:
        record["options"] = dict(options or {})
    return records


def store_records(path, records):
    with open_store(path) as store:
        for record in records:
            store.add(Result.from_dict(record))
    return str(path)


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


# ---------------------------------------------------------------- significance
def test_planted_10pct_difference_is_significant(tmp_path):
    path = store_records(tmp_path / "h.db", processes(1000.0, backend="torch", seed=1)
                         + processes(1100.0, backend="tensorflow", seed=2))
    table = compare(load_results(path), ["backend"], baseline="torch")
    assert len(table) == 1
    row = table.iloc[0]
    assert (row["baseline"], row["value"]) == ("torch", "tensorflow")
    assert row["ratio"] == pytest.approx(1.10, abs=0.01)
    assert row["ratio_ci_low"] > 1.0 and row["ci_basis"] == "processes"
    assert row["change_pct"] == pytest.approx(10.0, abs=1.0)
    assert row["p_value"] < 0.05
    assert (row["baseline_runs"], row["value_runs"]) == (5, 5)
    assert row["verdict"] == FASTER


def test_planted_0pct_difference_is_not_significant(tmp_path):
    path = store_records(tmp_path / "h.db", processes(1000.0, backend="torch", seed=3)
                         + processes(1000.0, backend="tensorflow", seed=4))
    row = compare(load_results(path), ["backend"]).iloc[0]
    assert row["ratio"] == pytest.approx(1.0, abs=0.01)
    assert row["ratio_ci_low"] <= 1.0 <= row["ratio_ci_high"]
    assert row["p_value"] > 0.05
    # no difference, and the whole CI within 2% of 1: the two are the same within the minimum effect
    assert row["verdict"] == "same within 2%" and 0.98 < row["ratio_ci_low"] and row["ratio_ci_high"] < 1.02


def test_planted_10pct_slowdown_is_slower_and_fails_a_5pct_gate():
    records = processes(1000.0, precision="fp32", seed=5) + processes(900.0, precision="tf32", seed=6)
    table = compare(records, ["precision"], baseline="fp32")
    assert table.iloc[0]["verdict"] == SLOWER
    assert table.iloc[0]["ratio"] == pytest.approx(0.90, abs=0.01)
    assert [r.value for r in fail_if_slower(table, 5)] == ["tf32"]
    assert fail_if_slower(table, 15) == []


def test_comparison_rows_are_typed_and_the_dataframe_is_their_export():
    records = (processes(1000.0, precision="fp32", seed=5) + processes(900.0, precision="tf32", seed=6)
               + processes(1000.0, precision="fp32", seed=7, batch_size=32)
               + processes(1000.0, precision="bf16", seed=8, batch_size=32))
    rows = comparison_rows(records, ["precision"], baseline="fp32")
    assert [(r.fixed("batch_size"), r.value, r.verdict) for r in rows] == [(64, "tf32", SLOWER),
                                                                                  (32, "bf16", "same within 2%")]
    frame = compare(records, ["precision"], baseline="fp32")
    assert list(frame.columns[-3:]) == ["higher_is_better", "busy", "warnings"] and "batch_size" in frame.columns
    assert "precision" not in frame.columns  # the compared field is no match field
    assert rows_of(frame) == rows  # the DataFrame read back is the same rows


def test_a_small_insignificant_dip_does_not_fail_the_gate():
    # 6% lower on the point estimate but drowned in the spread between processes: not a regression
    records = (processes(1000.0, spread=0.2, seed=7, noise=0.2, n=4)
               + processes(940.0, spread=0.2, backend="tensorflow", seed=8, noise=0.2, n=4))
    table = compare(records, ["backend"])
    assert table.iloc[0]["verdict"] == SAME
    assert fail_if_slower(table, 5) == []


def test_lower_is_better_metric_turns_the_verdict_around():
    records = processes(1000.0, seed=9) + processes(1100.0, backend="tensorflow", seed=10)
    for r in records:
        r["step_time_s"] = 64 / r["median"]
    row = compare(records, ["backend"], metric="step_time_s").iloc[0]
    assert row["ratio"] == pytest.approx(1000 / 1100, rel=0.02)
    assert bool(row["higher_is_better"]) is False
    assert row["verdict"] == FASTER  # a shorter step is faster
    # one value per process, one process a side: the ratio, and no verdict
    single = compare([records[0], records[5]], ["backend"], metric="step_time_s").iloc[0]
    assert single["ratio"] == pytest.approx(records[0]["median"] / records[5]["median"])
    assert single["verdict"].startswith(INCONCLUSIVE)


# ---------------------------------------------------------------- matching and pooling
def test_rows_match_only_when_every_other_field_agrees():
    records = [
        make_record(1000.0, backend="torch", batch_size=32, seed=11),
        make_record(1100.0, backend="tensorflow", batch_size=32, seed=12),
        make_record(2000.0, backend="torch", batch_size=64, seed=13),
        make_record(2200.0, backend="tensorflow", batch_size=64, seed=14),
        make_record(3000.0, backend="torch", batch_size=128, seed=15),  # no partner: no row
    ]
    table = compare(records, ["backend"])
    assert sorted(table["batch_size"]) == [32, 64]
    assert all(table["ratio"].round(2) == 1.10)


def test_several_by_fields_compare_their_combination():
    records = [
        make_record(1000.0, backend="torch", precision="fp32", seed=16),
        make_record(1500.0, backend="torch", precision="tf32", seed=17),
        make_record(1100.0, backend="tensorflow", precision="fp32", seed=18),
    ]
    table = compare(records, ["backend", "precision"], baseline="torch,fp32")
    assert set(table["value"]) == {"torch / tf32", "tensorflow / fp32"}
    assert set(table["baseline"]) == {"torch / fp32"}


def test_repeated_sessions_of_one_configuration_are_pooled():
    records = [
        make_record(1000.0, precision="fp32", session="a", seed=19),
        make_record(1000.0, precision="fp32", session="b", seed=20),
        make_record(1100.0, precision="amp_bf16", session="a", seed=21),
    ]
    row = compare(records, ["precision"]).iloc[0]
    assert (row["baseline_runs"], row["value_runs"]) == (2, 1)
    assert (row["baseline_samples"], row["value_samples"]) == (40, 20)


def test_pooling_runs_of_different_framework_versions_is_flagged():
    old, new = make_record(1000.0, session="a", seed=50), make_record(1000.0, session="b", seed=51)
    new["framework_version"] = "2.5.0"
    row = compare([old, new, make_record(1100.0, precision="tf32", seed=52)], ["precision"]).iloc[0]
    assert "fp32: pooled runs differ in framework_version (2.4.0, 2.5.0)" in row["warnings"]


def test_records_without_the_compared_parameter_stay_out():
    records = [
        make_record(1000.0, batch_size=32, seed=53), make_record(2000.0, batch_size=64, seed=54),
        make_record(50.0, workload="gemm", seed=55),  # gemm has no batch_size
    ]
    table = compare(records, "batch_size")
    assert list(table["workload"]) == ["resnet50_train"]
    assert (table.iloc[0]["baseline"], table.iloc[0]["value"]) == ("32", "64")


def test_only_ok_records_take_part():
    records = [
        make_record(1000.0, seed=22),
        make_record(1100.0, backend="tensorflow", seed=23),
        make_record(backend="tensorflow", status="failed"),
    ]
    row = compare(records, ["backend"]).iloc[0]
    assert row["value_runs"] == 1


def test_record_warnings_are_shown_in_the_warnings_column():
    records = [make_record(1000.0, seed=24, noise=0.2), make_record(1000.0, backend="tensorflow", seed=25)]
    row = compare(records, ["backend"]).iloc[0]
    assert "torch: CV" in row["warnings"] and "exceeds 5%" in row["warnings"]


def test_a_side_that_copies_its_batch_every_step_is_marked_beside_a_resident_one():
    def fed(record, copies):
        record["api"] = {"input_pipeline": {"source": "device", "prefetch_depth": 0 if copies else None,
                                            "pinned": False, "copy_stream": None, "copy_per_step": copies}}
        return record

    fit = [fed(make_record(1000.0, seed=30), False), fed(make_record(900.0, backend="tensorflow", seed=31), True)]
    warning = compare(fit, ["backend"]).iloc[0]["warnings"]
    assert "tensorflow copies its batch from host to device every step" in warning and "torch's stays" in warning
    alike = [fed(make_record(1000.0, seed=32), False), fed(make_record(900.0, backend="tensorflow", seed=33), False)]
    assert "copies its batch" not in str(compare(alike, ["backend"]).iloc[0]["warnings"])
    unsaid = [make_record(1000.0, seed=34), fed(make_record(900.0, backend="tensorflow", seed=35), True)]
    assert "copies its batch" not in str(compare(unsaid, ["backend"]).iloc[0]["warnings"])  # older records: unknown


def test_backend_aliases_are_accepted_as_baseline():
    records = [make_record(1000.0, seed=26), make_record(1100.0, backend="tensorflow", seed=27)]
    assert compare(records, ["backend"], baseline="tf").iloc[0]["baseline"] == "tensorflow"


def test_device_comparison_shows_the_datasheet_ratio_beside_the_measured_one():
    records = [
        make_record(387.0, device_name="NVIDIA RTX A6000", seed=28, workload="gemm"),
        make_record(700.0, device_name="NVIDIA GeForce RTX 4090", seed=29, workload="gemm"),
    ]
    row = compare(records, ["device_name"], baseline="NVIDIA RTX A6000").iloc[0]
    assert row["ratio"] == pytest.approx(700 / 387, rel=0.01)
    assert row["datasheet_ratio"] == pytest.approx(82.6 / 38.7)
    assert "82.6 / 38.7 = 2.13" in row["datasheet"]


def test_datasheet_ratio_is_empty_where_a_device_has_no_figure_for_the_precision():
    records = [
        make_record(100.0, device_name="Imaginary GPU 9000", seed=30, workload="gemm", precision="bf16"),
        make_record(200.0, device_name="NVIDIA H200", seed=31, workload="gemm", precision="bf16"),
    ]
    row = compare(records, ["device_name"]).iloc[0]
    assert row["datasheet_ratio"] is None or row["datasheet_ratio"] != row["datasheet_ratio"]


def test_technique_speedups_compare_each_technique_with_its_usual_baseline():
    records = [
        make_record(1000.0, precision="fp32", seed=32),
        make_record(2500.0, precision="amp_bf16", seed=33),
        make_record(1000.0, execution="eager", precision="amp_bf16", seed=34),
        make_record(1200.0, execution="graph", precision="amp_bf16", seed=35),
    ]
    tables = technique_speedups(records)
    assert set(tables) == {"precision", "execution"}
    assert [r.baseline for r in tables["precision"]] == ["fp32"]
    assert [r.baseline for r in tables["execution"]] == ["eager"]


def test_unknown_field_and_unmatched_results_are_input_errors():
    records = [make_record(1000.0, seed=36), make_record(1100.0, backend="tensorflow", seed=37)]
    with pytest.raises(InputError, match="no such field"):
        compare(records, ["colour"])
    with pytest.raises(InputError, match="no two ok results differ only in precision"):
        compare(records, ["precision"])
    with pytest.raises(InputError, match="--baseline jax"):
        compare(records, ["backend"], baseline="jax")


# ---------------------------------------------------------------- the command
def _two_sessions(tmp_path, change):
    return store_records(tmp_path / "h.db", (
        processes(1000.0, session="before", seed=40)
        + processes(1000.0 * (1 + change), session="after", seed=41)
        + processes(50.0, session="before", seed=42, workload="gemm")
        + processes(50.0 * (1 + change), session="after", seed=43, workload="gemm")
    ))


def test_fail_if_slower_exits_1_when_a_10pct_regression_is_planted(tmp_path):
    path = _two_sessions(tmp_path, -0.10)
    result = invoke("compare", "--store", path, "--session", "before", "--session", "after", "--fail-if-slower", 5)
    assert result.exit_code == 1, result.output
    regressed = fail_if_slower(compare(load_records(path), ["session_id"], baseline="before"), 5)
    assert [(row.fixed("workload"), row.value) for row in regressed] == [("resnet50_train", "after"),
                                                                          ("gemm", "after")]
    assert all(slowdown_pct(row) == pytest.approx(10.0, abs=1.5) for row in regressed)
    assert sum(line.startswith("regression: after is ") for line in result.output.splitlines()) == 2


def test_fail_if_slower_exits_0_when_nothing_regressed(tmp_path):
    path = _two_sessions(tmp_path, 0.0)
    result = invoke("compare", "--store", path, "--session", "before", "--session", "after", "--fail-if-slower", 5)
    assert result.exit_code == 0, result.output
    assert "no row slower by more than 5%" in result.output


def test_fail_if_slower_exits_0_when_the_change_is_a_speedup(tmp_path):
    path = _two_sessions(tmp_path, 0.10)
    result = invoke("compare", "--store", path, "--by", "session_id", "--baseline", "before", "--fail-if-slower", 5)
    assert result.exit_code == 0, result.output
    assert "faster" in result.output


def test_session_ids_may_be_given_by_prefix(tmp_path):
    path = store_records(tmp_path / "h.db", [
        make_record(1000.0, session="20250101-aaaa", seed=44), make_record(1100.0, session="20250102-bbbb", seed=45),
    ])
    result = invoke("compare", "--store", path, "--session", "20250101", "--session", "20250102", "--format", "json")
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.output)
    assert (row["baseline"], row["value"]) == ("20250101-aaaa", "20250102-bbbb")
    reverse = invoke("compare", "--store", path, "--by", "session_id", "--baseline", "20250102", "--format", "json")
    assert json.loads(reverse.output)[0]["baseline"] == "20250102-bbbb"


def _stored_backends(tmp_path):
    return store_records(tmp_path / "h.db", (
        processes(1000.0, backend="torch", seed=46, batch_size=32)
        + processes(1100.0, backend="tensorflow", seed=47, batch_size=32)
        + processes(2000.0, backend="torch", seed=48, batch_size=64)
        + processes(2000.0, backend="tensorflow", seed=49, batch_size=64)
    ))


def test_table_format_shows_ratio_ci_and_verdict(tmp_path):
    result = invoke("compare", "--store", _stored_backends(tmp_path), "--by", "backend", "--baseline", "torch")
    assert result.exit_code == 0, result.output
    assert "ratio [95% CI]" in result.output and "processes" in result.output and "5 vs 5" in result.output
    assert "faster" in result.output and "same within 2%" in result.output
    assert "compared: backend; from session s1, 5 vs 5 processes; every row: workload=resnet50_train" in result.output


def test_json_format_parses_to_one_object_per_row(tmp_path):
    result = invoke("compare", "--store", _stored_backends(tmp_path), "--by", "backend", "--format", "json")
    rows = json.loads(result.output)
    assert [r["batch_size"] for r in rows] == [32, 64]
    assert rows[0]["verdict"] == "faster" and rows[1]["verdict"] == "same within 2%"
    assert isinstance(rows[0]["p_value"], float)


def test_csv_format_parses_with_a_header(tmp_path):
    result = invoke("compare", "--store", _stored_backends(tmp_path), "--by", "backend", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.output)))
    assert len(rows) == 2
    assert float(rows[0]["ratio"]) == pytest.approx(1.10, abs=0.01)


def test_markdown_format_is_a_table_with_one_line_per_row(tmp_path):
    result = invoke("compare", "--store", _stored_backends(tmp_path), "--by", "backend", "--format", "markdown")
    lines = [line for line in result.output.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + 2
    assert set(lines[1]) <= set("|-")
    assert len({line.count(" | ") for line in lines[2:]}) == 1
    assert "ratio [95% CI]" in lines[0]


def test_comma_separated_by_equals_repeated_by(tmp_path):
    path = _stored_backends(tmp_path)
    one = invoke("compare", "--store", path, "--by", "backend,batch_size", "--format", "json")
    two = invoke("compare", "--store", path, "--by", "backend", "--by", "batch_size", "--format", "json")
    assert one.output == two.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--by", "colour"], "--by colour: no such field"),
        (["--by", "backend", "--session", "nope"], "no single session matches 'nope'"),
        ([], "give --by FIELD"),
    ],
)
def test_bad_input_exits_2_with_one_clear_message(tmp_path, args, message):
    result = invoke("compare", "--store", _stored_backends(tmp_path), *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_and_empty_stores_exit_2(tmp_path):
    missing = invoke("compare", "--store", tmp_path / "nothing.db", "--by", "backend")
    assert missing.exit_code == 2 and "no such file" in missing.output
    open_store(tmp_path / "empty.db").close()
    empty = invoke("compare", "--store", tmp_path / "empty.db", "--by", "backend")
    assert empty.exit_code == 2 and "no results" in empty.output


def test_scaling_efficiency_takes_the_fewest_replicas_as_baseline_whichever_ran_first():
    # seen on two H200s (2026-11-30): the 2-replica run came first, became the baseline, and the table said
    # 115.4% for what was 86.6%
    records = [make_record(1800.0, replicas=2, seed=31), make_record(1000.0, replicas=1, seed=32)]
    table = compare(records, ["replicas"])
    (row,) = table.to_dict("records")
    assert (row["baseline"], row["value"]) == ("1", "2")
    assert row["scaling_efficiency"] == pytest.approx(row["value_median"] / (2 * row["baseline_median"]))
    assert 0.85 < row["scaling_efficiency"] < 0.95
    # a baseline of 2 replicas named by the user: the rows turn round, the efficiency (of 2 replicas) does not
    (named,) = compare(records, ["replicas"], baseline="2").to_dict("records")
    assert (named["baseline"], named["value"]) == ("2", "1")
    assert named["scaling_efficiency"] == pytest.approx(row["scaling_efficiency"])


def test_by_backend_the_default_baseline_is_torch_whichever_backend_ran_first():
    # seen on the H200 (2026-12-02): a session's shuffled runs started with Keras 3, and `compare --by backend`
    # printed every row against tensorflow[keras=keras3]
    records = (processes(400.0, backend="tensorflow", options={"keras": "tf_keras"}, seed=61)
               + processes(300.0, backend="tensorflow", options={"keras": "keras3"}, seed=62)
               + processes(500.0, backend="jax", seed=63) + processes(1000.0, seed=64))
    rows = compare(records, ["backend"]).to_dict("records")
    assert {row["baseline"] for row in rows} == {"torch"}
    # then tensorflow's variants by name, then the backends harness does not bundle
    assert [row["value"] for row in rows] == ["tensorflow[keras=keras3]", "tensorflow[keras=tf_keras]", "jax"]
    # among TensorFlow's variants alone: the same each time, whichever ran first
    tf_only = [r for r in records if r["backend"] == "tensorflow"]
    for ordered in (tf_only, tf_only[5:] + tf_only[:5]):
        (row,) = compare(ordered, ["backend"]).to_dict("records")
        assert (row["baseline"], row["value"]) == ("tensorflow[keras=keras3]", "tensorflow[keras=tf_keras]")
    # a named baseline still wins
    assert {row["baseline"] for row in compare(records, ["backend"], baseline="jax").to_dict("records")} == {"jax"}


# ---------------------------------------------------------------- records in
def test_load_records_gives_results_in_store_order(tmp_path):
    rows = processes(1000.0, n=2, seed=50) + processes(900.0, n=2, backend="tensorflow", seed=51)
    loaded = load_records(store_records(tmp_path / "h.db", rows))
    assert all(isinstance(r, Result) for r in loaded)
    assert [r.run_id for r in loaded] == [row["run_id"] for row in rows]


def test_rows_and_dataframes_are_typed_at_the_door_with_nan_as_none(tmp_path):
    rows = processes(1000.0, n=5, seed=52) + processes(1100.0, n=5, backend="tensorflow", seed=53)
    frame = load_results(store_records(tmp_path / "h.db", rows))
    typed = as_results(frame)
    assert all(isinstance(r, Result) for r in typed) and typed[0].error is None  # NaN in the frame
    assert as_results(typed)[0] is typed[0]
    assert [r.run_id for r in ok_records(rows)] == [r.run_id for r in typed]
    by_frame, by_rows, by_results = (compare(x, ["backend"]).to_dict("records") for x in (frame, rows, typed))
    assert by_frame == by_rows == by_results
