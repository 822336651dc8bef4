"""A backend with non-default options is a variant of its own: compared, never pooled with another,
named as a baseline with the backend's alias, and given its fastest configuration.

The simulations are seeded: each test gives the same answer on every run.
"""

import json

import pytest
from click.testing import CliRunner

from harness.cli import main
from harness.results.compare import (
    FASTER,
    backend_variant,
    compare,
    describe_fastest,
    fastest_configurations,
)
from harness.results.record import Result
from tests.test_compare import processes, store_records


# ---------------------------------------------------------------- options are never pooled
def _keras_records():
    out = []
    for i, (keras, mean) in enumerate((("keras3", 1000.0), ("tf_keras", 1300.0))):
        for precision, scale in (("fp32", 1.0), ("amp_bf16", 2.0)):
            out += processes(mean * scale, backend="tensorflow", seed=10 * i + int(scale), precision=precision,
                             options={"keras": keras})
    out += processes(1100.0, backend="torch", seed=7, options={"compile_mode": "default"})
    out += processes(2100.0, backend="torch", seed=8, precision="amp_bf16", options={"compile_mode": "default"})
    return out


def test_backend_variants_name_their_non_default_options():
    assert backend_variant(Result(backend="torch", options={"compile_mode": "default"})) == "torch"
    assert backend_variant(Result(backend="tensorflow", options={"keras": "auto"})) == "tensorflow"
    assert backend_variant(Result(backend="tensorflow", options={"keras": "tf_keras"})) == "tensorflow[keras=tf_keras]"
    assert backend_variant(Result(backend="torch", options={"compile_mode": "max-autotune"})) == \
        "torch[compile_mode=max-autotune]"
    assert backend_variant(Result.from_dict({"backend": "torch"})) == "torch"  # records older than options


def test_records_that_differ_in_options_are_never_pooled():
    table = compare(_keras_records(), ["precision"], baseline="fp32")
    assert len(table) == 3  # tensorflow keras3, tensorflow tf_keras, torch: each compared within itself
    assert set(table["baseline_runs"]) == {5} and set(table["value_runs"]) == {5}
    by_options = {row["options"] if isinstance(row["options"], str) else "-": row for row in table.to_dict("records")}
    assert by_options['{"keras": "keras3"}']["baseline_median"] == pytest.approx(1000.0, rel=0.01)
    assert by_options['{"keras": "tf_keras"}']["baseline_median"] == pytest.approx(1300.0, rel=0.01)


def test_by_backend_compares_the_variants_and_torch_stays_the_baseline():
    table = compare(_keras_records(), ["backend"], baseline="torch")
    fp32 = table[table["precision"] == "fp32"]
    assert set(fp32["value"]) == {"tensorflow[keras=keras3]", "tensorflow[keras=tf_keras]"}
    assert set(table["baseline"]) == {"torch"}
    row = fp32[fp32["value"] == "tensorflow[keras=tf_keras]"].iloc[0]
    assert row["value_median"] == pytest.approx(1300.0, rel=0.01) and row["verdict"] == FASTER
    # a variant may be named as the baseline, with the backend's alias
    other = compare(_keras_records(), ["backend"], baseline="tf[keras=keras3]")
    assert set(other["baseline"]) == {"tensorflow[keras=keras3]"}


def test_a_backend_name_as_baseline_resolves_to_its_single_variant_or_asks():
    from harness.errors import InputError

    keras3 = [r for r in _keras_records() if r["options"].get("keras") != "tf_keras"]
    assert set(compare(keras3, ["backend"], baseline="tensorflow")["baseline"]) == {"tensorflow[keras=keras3]"}
    with pytest.raises(InputError, match="several variants match"):
        compare(_keras_records(), ["backend"], baseline="tensorflow")


def test_older_records_without_options_match_records_with_default_options():
    old = processes(1000.0, seed=1)  # no options field value
    new = processes(1500.0, precision="amp_bf16", seed=2, options={"compile_mode": "default"})
    for r in old:
        r["options"] = None
    row = compare(old + new, ["precision"]).iloc[0]
    assert (row["baseline_runs"], row["value_runs"]) == (5, 5)


# ---------------------------------------------------------------- fastest configuration per framework
def test_fastest_configuration_per_backend_variant_and_workload():
    rows = fastest_configurations(_keras_records())
    by = {(r["workload"], r["backend"]): r for r in rows}
    assert set(by) == {("resnet50_train", "tensorflow[keras=keras3]"), ("resnet50_train", "tensorflow[keras=tf_keras]"),
                       ("resnet50_train", "torch")}
    best = by[("resnet50_train", "tensorflow[keras=tf_keras]")]
    assert best["config"] == {"precision": "amp_bf16"} and best["median"] == pytest.approx(2600.0, rel=0.01)
    assert best["unit"] == "images/s" and best["processes"] == 5 and best["configurations"] == 2
    lines = describe_fastest(rows)
    assert (f"fastest tensorflow[keras=tf_keras] on resnet50_train: precision=amp_bf16: {best['median']:,.0f} images/s"
            in lines[1])
    assert all("images/s (median of 5 processes; fastest of 2 configurations)" in line for line in lines)


def test_fastest_configuration_of_a_time_metric_is_the_smallest():
    records = processes(1000.0, seed=1, batch_size=32) + processes(1800.0, seed=2, batch_size=64)
    for r in records:
        r["step_time_s"] = r["params"]["batch_size"] / r["median"]
    (row,) = fastest_configurations(records, "step_time_s")
    assert row["config"] == {"batch_size": 32}  # 0.032 s per step against 0.036 s
    assert fastest_configurations(records, "peak_allocated_bytes") == []  # memory has no "fastest"


def test_compare_by_backend_prints_each_frameworks_fastest_configuration(tmp_path):
    path = store_records(tmp_path / "h.db", _keras_records())
    result = CliRunner().invoke(main, ["compare", "--store", path, "--by", "backend", "--baseline", "torch"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("fastest ")]
    assert [line.split(" on ")[0] for line in lines] == [
        "fastest tensorflow[keras=keras3]", "fastest tensorflow[keras=tf_keras]", "fastest torch"]
    assert all("precision=amp_bf16" in line and "images/s" in line for line in lines)
    plain = CliRunner().invoke(main, ["compare", "--store", path, "--by", "precision"])
    assert "fastest " not in plain.output  # only after a --by backend table
    as_json = CliRunner().invoke(main, ["compare", "--store", path, "--by", "backend", "--format", "json"])
    assert isinstance(json.loads(as_json.output), list)  # the lines never break machine-readable output


