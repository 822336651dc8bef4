"""The plan runs each configuration in `measure.processes` worker processes, in rounds shuffled from the
seed, so that no configuration always runs first; a RunSpec carries which process it is."""

import json

from harness.scenario.load import load_scenario
from harness.session.plan import RunSpec, build_plan
from harness.timing.settings import Measure

DEFAULT_PROCESSES = Measure().processes


def _plan_scenario(write_scenario, seed=0, processes=4, **extra):
    return load_scenario(write_scenario({
        "name": "p", "workload": "gemm", "params": {"size": 64}, "backends": ["torch", "tensorflow"],
        "devices": ["cpu"], "seed": seed, "measure": {"processes": processes}, **extra,
    }))


def test_the_plan_runs_each_configuration_in_n_processes_in_interleaved_rounds(write_scenario):
    plan = build_plan(_plan_scenario(write_scenario, sweep={"precision": ["fp32", "bf16"]}), "s")
    assert len(plan) == 4 * 4  # 2 precisions x 2 backends x 4 processes
    keys = {s.run_key for s in plan}
    assert len(keys) == 4 and all(sum(s.run_key == k for s in plan) == 4 for k in keys)
    assert len({s.run_id for s in plan}) == 16
    for r in range(4):  # round r: replicate r of every configuration, once each
        chunk = plan[4 * r: 4 * r + 4]
        assert {s.replicate for s in chunk} == {r} and {s.run_key for s in chunk} == keys
    orders = [tuple(s.run_key for s in plan[4 * r: 4 * r + 4]) for r in range(4)]
    assert len(set(orders)) > 1  # each round shuffled anew: no configuration always first
    assert "[process 1/4]" in plan[0].label()


def test_the_plan_order_comes_from_the_seed(write_scenario):
    def order(seed):
        return [(s.backend, s.replicate) for s in build_plan(_plan_scenario(write_scenario, seed=seed, processes=6), "s")]

    assert order(0) == order(0)
    assert len({tuple(order(seed)) for seed in range(6)}) > 1
    firsts = {order(seed)[0][0] for seed in range(12)}
    assert firsts == {"torch", "tensorflow"}  # torch does not always go first


def test_option_sweeps_still_skip_repeated_backends_with_processes(write_scenario):
    plan = build_plan(_plan_scenario(write_scenario, processes=3, sweep={"tensorflow.keras": ["keras3", "tf_keras"]}), "s")
    assert sorted({(s.backend, json.dumps(s.options, sort_keys=True)) for s in plan}) == [
        ("tensorflow", '{"keras": "keras3"}'), ("tensorflow", '{"keras": "tf_keras"}'),
        ("torch", '{"compile_mode": "default"}')]
    assert len(plan) == 3 * 3  # torch once, not once per Keras


def test_processes_default_to_auto_planning_the_least_and_one_gives_one_run_per_configuration(write_scenario):
    assert DEFAULT_PROCESSES == "auto"
    assert len(build_plan(_plan_scenario(write_scenario, processes=1), "s")) == 2
    plan = build_plan(_plan_scenario(write_scenario, processes="auto"), "s")
    assert len(plan) == 2 * 4  # the fewest processes per side with which a verdict can exist at alpha 0.05
    assert "[process 1/4-10]" in plan[0].label()
    plan = build_plan(_plan_scenario(write_scenario, processes="auto", measure={
        "processes": "auto", "min_processes": 6, "max_processes": 8}), "s")
    assert len(plan) == 2 * 6 and "[process 1/6-8]" in plan[0].label()


def test_runspec_from_dict_takes_replicate_and_tolerates_old_and_new_fields():
    spec = build_plan_spec()
    data = spec.to_dict()
    assert data["replicate"] == 2 and RunSpec.from_dict(data) == spec
    old = {k: v for k, v in data.items() if k != "replicate"}
    assert RunSpec.from_dict(old).replicate == 0
    assert RunSpec.from_dict({**data, "capacity": {"start": 1}, "planned_index": 7}) == spec
    assert spec.with_params(size=128).replicate == 2


def build_plan_spec():
    return RunSpec(run_id="r", session_id="s", run_key="k", scenario="p", workload="gemm", backend="torch",
                   device="cpu", params={"size": 64}, measure={"processes": 5}, seed=0, replicate=2)


