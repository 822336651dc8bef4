"""Scenario files: every kind of bad input is a clear InputError; sweeps and overrides expand right."""

import pytest

from harness.errors import InputError
from harness.scenario.load import (
    apply_overrides,
    count_points,
    load_scenario,
    parse_override,
    sweep_points,
)
from harness.session.plan import build_plan

GOOD = {
    "name": "t",
    "workload": "gemm",
    "params": {"size": 64, "precision": "fp32"},
    "measure": {"warmup": 1, "steps": 2, "repeats": 3},
    "backends": ["torch", "tf"],
    "devices": ["cpu"],
}


def _error(path, overrides=None) -> InputError:
    with pytest.raises(InputError) as info:
        load_scenario(path, overrides)
    return info.value


def test_a_good_file_validates_and_aliases_are_canonical(write_scenario):
    scenario = load_scenario(write_scenario(GOOD))
    assert scenario.backends == ["torch", "tensorflow"]
    assert scenario.devices == ["cpu"]


@pytest.mark.parametrize(
    "change, field, expected",
    [
        ({"measure": {"steps": 0}}, "measure.steps", "expected auto or a whole number from 1"),
        ({"measure": {"steps": "many"}}, "measure.steps", "expected auto or a whole number from 1"),
        ({"measure": {"wamup": 3}}, "measure.wamup", "unknown field"),
        ({"workload": "bert"}, "workload", "expected one of"),
        ({"backends": ["mxnet"]}, "backends", "unknown backend"),
        ({"devices": ["tpu:0"]}, "devices", "cuda:N"),
        ({"params": {"size": 64, "precision": "fp8"}}, "params.precision", "fp32"),
        ({"params": {"size": -1}}, "params.size", "greater than or equal to 1"),
        ({"params": {"size": 64, "colour": "red"}}, "params.colour", "unknown field"),
        ({"sweep": {"size": []}}, "sweep", "empty"),
        ({"sweep": {"nonsense": [1, 2]}}, "sweep.nonsense", "not a parameter"),
        ({"sweep": {"precision": ["fp32", "fp9"]}}, "params.precision", "sweep point"),
        ({"seed": -5}, "seed", "greater than or equal to 0"),
        ({"extra_top": 1}, "extra_top", "unknown field"),
    ],
)
def test_each_bad_field_is_named_with_what_was_expected(write_scenario, change, field, expected):
    path = write_scenario({**GOOD, **change})
    err = _error(path)
    text = str(err)
    assert text.startswith(path)
    assert f"`{field}" in text
    assert expected in text


def test_missing_required_field_is_named(write_scenario):
    data = dict(GOOD)
    del data["workload"]
    err = _error(write_scenario(data))
    assert "`workload`" in str(err) and "required" in str(err)


def test_syntax_error_gives_line_and_column(write_scenario):
    err = _error(write_scenario("name: x\nworkload: gemm\nparams: {size: 3\n"))
    assert "not valid YAML" in str(err) and "line" in str(err)


def test_missing_file_and_non_mapping_are_clear(tmp_path, write_scenario):
    assert "no such file" in str(_error(str(tmp_path / "absent.yaml")))
    assert "expected a mapping" in str(_error(write_scenario("- just\n- a list\n")))
    assert "empty" in str(_error(write_scenario("")))


def test_python_object_tags_are_refused_not_executed(write_scenario, tmp_path):
    flag = tmp_path / "pwned"
    text = f"name: !!python/object/apply:os.system ['touch {flag}']\nworkload: gemm\n"
    err = _error(write_scenario(text))
    assert "not valid YAML" in str(err) or "refused" in str(err)
    assert not flag.exists()


def test_deep_nesting_and_alias_bombs_are_refused(write_scenario):
    deep = "name: x\nworkload: gemm\nparams: " + "[" * 60 + "]" * 60 + "\n"
    assert "nesting" in str(_error(write_scenario(deep)))
    lines = ["a: &a [1, 2]"] + [f"b{i}: &b{i} [*{'a' if i == 0 else f'b{i-1}'}, *{'a' if i == 0 else f'b{i-1}'}]" for i in range(80)]
    assert "aliases" in str(_error(write_scenario("\n".join(lines) + "\n")))


def test_sweep_is_the_cartesian_product_in_file_order(write_scenario):
    data = {**GOOD, "sweep": {"size": [32, 64, 128], "precision": ["fp32", "bf16"]}}
    scenario = load_scenario(write_scenario(data))
    points = sweep_points(scenario)
    assert count_points(scenario) == 6
    assert points[0] == {"size": 32, "precision": "fp32"}
    assert points[1] == {"size": 32, "precision": "bf16"}
    assert len({tuple(sorted(p.items())) for p in points}) == 6
    plan = build_plan(scenario, "s")
    # 6 points x 2 backends x 1 device x processes (under the default `auto`, its least: 4)
    assert len(plan) == 12 * scenario.measure.process_bounds()[0] == 48
    assert {s.backend for s in plan} == {"torch", "tensorflow"}
    assert len({s.run_key for s in plan}) == 12  # each configuration's processes share its key


def test_overrides_take_the_declared_type_and_replace_a_sweep(write_scenario):
    data = {**GOOD, "sweep": {"size": [32, 64]}}
    scenario = load_scenario(write_scenario(data), ["size=4096", "precision=bf16", "measure.steps=7", "seed=3"])
    assert scenario.sweep == {}
    plan = build_plan(scenario, "s")
    assert plan[0].params["size"] == 4096 and isinstance(plan[0].params["size"], int)
    assert plan[0].params["precision"] == "bf16"
    assert plan[0].measure.steps == 7 and plan[0].seed == 3


def test_an_override_list_becomes_a_sweep(write_scenario):
    scenario = load_scenario(write_scenario(GOOD), ["size=[16, 32]"])
    assert scenario.sweep == {"size": [16, 32]}


@pytest.mark.parametrize("text", ["size", "=3", "a b=3", "size={x: 1}", "size=[1,"])
def test_malformed_overrides_are_clear_errors(text):
    with pytest.raises(InputError) as info:
        apply_overrides(dict(GOOD), [text])
    assert "--set" in str(info.value)


def test_override_with_a_wrong_type_names_the_field(write_scenario):
    err = _error(write_scenario(GOOD), ["size=big"])
    assert "`params.size`" in str(err) and "integer" in str(err)


def test_parse_override_keeps_strings_and_numbers():
    assert parse_override("precision=bf16") == ("precision", "bf16")
    assert parse_override("measure.min_time_s=0.5") == ("measure.min_time_s", 0.5)


def test_a_sweep_beyond_the_run_limit_is_refused_with_its_count(write_scenario):
    data = {**GOOD, "sweep": {"size": list(range(1, 41)), "batch": list(range(1, 31))}}
    path = write_scenario(data)
    with pytest.raises(InputError) as info:
        load_scenario(path)
    # 1200 points x 2 backends x 1 device x 4 processes (the least of the default `auto`)
    assert "9600 runs" in str(info.value) and "--max-runs" in str(info.value)
    assert count_points(load_scenario(path, max_runs=9600)) == 1200


def test_gemm_needs_a_size_or_all_three_dimensions(write_scenario):
    err = _error(write_scenario({**GOOD, "params": {"m": 4, "n": 4}}))
    assert "size" in str(err) and "`params" in str(err)


def test_a_file_of_several_documents_is_several_scenarios_and_set_applies_where_it_fits(write_scenario):
    from harness.scenario.load import load_scenarios

    text = (
        "name: g\nworkload: gemm\nparams: {size: 64}\n---\n"
        "name: r\nworkload: resnet50_train\nparams: {batch_size: 2, image_size: 32}\n"
    )
    path = write_scenario(text)
    gemm, resnet = load_scenarios(path, ["size=128", "batch_size=4"])
    assert gemm.params["size"] == 128 and resnet.params["batch_size"] == 4
    with pytest.raises(InputError) as info:
        load_scenarios(path, ["colour=red"])
    assert "--set colour" in str(info.value)
    bad = write_scenario(text + "---\nname: x\nworkload: gemm\nparams: {size: -1}\n", name="bad.yaml")
    with pytest.raises(InputError) as info:
        load_scenarios(bad)
    assert "(document 3)" in str(info.value) and "`params.size`" in str(info.value)


def test_every_bundled_scenario_is_valid():
    from harness.scenario.bundled import bundled_scenarios
    from harness.scenario.load import load_scenarios

    names = {p.stem for p in bundled_scenarios()}
    assert {"quickstart", "gemm", "gpu_comparison", "resnet50_train", "mixed_precision", "recompute", "graph_capture",
            "transformer"} <= names
    for path in bundled_scenarios():
        assert load_scenarios(path)


def test_a_workload_that_is_not_a_string_is_a_clear_error(write_scenario):
    err = _error(write_scenario({**GOOD, "workload": []}), ["size=8"])
    assert "`workload`" in str(err)


def test_the_two_gpu_comparison_trains_each_framework_the_way_its_users_do():
    # TensorFlow's eager mode is a debugging mode (49-55 images/s against torch eager's 840 on an H200):
    # a bundled comparison that ran it would measure the mode, not the GPUs
    from harness.scenario.bundled import bundled_scenarios
    from harness.scenario.load import load_scenarios

    path = next(p for p in bundled_scenarios() if p.stem == "gpu_comparison")
    runs = [spec for scenario in load_scenarios(path) for spec in build_plan(scenario, "s")]
    training = {(s.backend, s.params["execution"]) for s in runs if s.workload == "resnet50_train"}
    # TensorFlow's users train with Keras's model.fit at its defaults: execution default, resolved by the backend
    assert training == {("torch", "eager"), ("tensorflow", "default")}
    assert {s.device for s in runs} == {"cuda:0", "cuda:1"}
    assert {s.backend for s in runs if s.workload == "gemm"} == {"torch", "tensorflow"}
    # at least 4 processes per GPU (processes: auto), the fewest whose rank test can reach p < 0.05: memory is
    # compared from the training records' peaks (--metric peak_allocated_bytes), not from a one-process document
    assert {s.measure.processes for s in runs} == {"auto"}
    assert all(sum(r.run_key == s.run_key for r in runs) == 4 for s in runs)
    assert {s.scenario for s in runs} == {"gpu-comparison-gemm", "gpu-comparison-resnet50-torch",
                                          "gpu-comparison-resnet50-tensorflow"}
