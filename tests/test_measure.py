"""The timed loop: first step alone, warm-up untimed, blocks synchronized, adaptive repetition."""

import itertools

import pytest

from harness.timing.loop import BlockTime, StopRule, Timing, run_timed
from harness.timing.settings import Measure


class ScriptedClock:
    """A clock whose blocks take the scripted seconds; counts syncs and the steps inside each block."""

    def __init__(self, block_seconds):
        self.block_seconds = iter(block_seconds)
        self.syncs = 0
        self.first = True

    def sync(self):
        self.syncs += 1

    def start(self):
        self.sync()
        return None

    def stop(self, token):
        self.sync()
        if self.first:  # the first step, timed alone
            self.first = False
            return BlockTime(5.0)
        return BlockTime(next(self.block_seconds))


def test_first_step_and_warmup_are_not_in_the_timed_blocks():
    calls = []
    clock = ScriptedClock(itertools.repeat(1.0))
    timing = run_timed(lambda: calls.append(1), clock, Measure(warmup=4, steps=3, repeats=2))
    assert len(calls) == 1 + 4 + 2 * 3
    assert timing.first_step_s == 5.0
    assert timing.wall_s == [1.0, 1.0] and timing.steps_per_block == 3
    assert timing.rates(work_per_step=10) == [30.0, 30.0]
    assert timing.stop_reason == "repeats"


def test_a_workloads_warmup_floor_raises_the_warmup_and_the_record_says_so():
    calls = []
    # eight steps before timing (two passes of a host dataset): the first call and seven warm-up calls
    timing = run_timed(lambda: calls.append(1), ScriptedClock(itertools.repeat(1.0)),
                       Measure(warmup=2, steps=3, repeats=2), warmup_floor_steps=8)
    assert len(calls) == 1 + 7 + 2 * 3 and timing.fields()["warmup_raised_to"] == 7
    # a call of k = 20 steps (Keras fit) covers the floor with its first call: warm-up as asked, nothing said
    calls.clear()
    timing = run_timed(lambda: calls.append(1), ScriptedClock(itertools.repeat(1.0)),
                       Measure(warmup=2, steps=3, repeats=2), warmup_floor_steps=8, steps_per_call=20)
    assert len(calls) == 1 + 2 + 2 * 3 and "warmup_raised_to" not in timing.fields()
    # a warm-up already above the floor is kept
    timing = run_timed(lambda: None, ScriptedClock(itertools.repeat(1.0)),
                       Measure(warmup=10, steps=1, repeats=2), warmup_floor_steps=8)
    assert "warmup_raised_to" not in timing.fields()


def test_resnet50s_warmup_floor_is_two_passes_of_the_host_dataset_and_nothing_on_the_device():
    from harness.workloads.host_inputs import HOST_BATCHES
    from harness.workloads.resnet50_train import RESNET50_TRAIN

    host = RESNET50_TRAIN.validate({"batch_size": 2, "image_size": 32, "inputs": "host"})
    device = RESNET50_TRAIN.validate({"batch_size": 2, "image_size": 32})
    assert RESNET50_TRAIN.warmup_floor(host) == 2 * HOST_BATCHES and RESNET50_TRAIN.warmup_floor(device) == 0


def test_target_ci_keeps_repeating_until_the_interval_is_narrow():
    noisy_then_steady = [1.0, 1.5, 0.7] + [1.0] * 100
    timing = run_timed(lambda: None, ScriptedClock(noisy_then_steady),
                       Measure(warmup=0, steps=1, repeats=3, target_ci_pct=2.0, max_repeats=200))
    assert timing.stop_reason == "target_ci"
    assert 3 < len(timing.blocks) < 200


def test_max_repeats_ends_a_search_that_never_gets_narrow_and_says_so():
    alternating = itertools.cycle([1.0, 2.0])
    timing = run_timed(lambda: None, ScriptedClock(alternating),
                       Measure(warmup=0, steps=1, repeats=3, target_ci_pct=0.1, max_repeats=12))
    assert timing.stop_reason == "max_repeats" and len(timing.blocks) == 12


def test_min_time_runs_blocks_until_enough_time_was_timed():
    timing = run_timed(lambda: None, ScriptedClock(itertools.repeat(0.25)),
                       Measure(warmup=0, steps=1, repeats=2, min_time_s=2.0))
    assert timing.stop_reason == "min_time" and len(timing.blocks) == 8


def test_telemetry_covers_only_the_timed_blocks():
    events = []

    class Probe:
        def start(self):
            events.append("start")

        def stop(self):
            events.append("stop")

    def step():
        events.append("step")

    run_timed(step, ScriptedClock(itertools.repeat(1.0)), Measure(warmup=2, steps=1, repeats=2), telemetry=Probe())
    assert events == ["step", "step", "step", "start", "step", "step", "stop"]


@pytest.mark.parametrize("bad", [{"steps": 0}, {"repeats": 0}])
def test_the_scenario_schema_refuses_empty_measurements(bad, write_scenario):
    from harness.errors import InputError
    from harness.scenario.load import load_scenario

    with pytest.raises(InputError):
        load_scenario(write_scenario({"name": "m", "workload": "gemm", "params": {"size": 8}, "measure": bad}))


def test_progress_hears_each_phase_and_the_rate_so_far():
    from harness.timing import stats
    from harness.timing.loop import WallClock

    events = []
    timing = run_timed(lambda: None, WallClock(), Measure(warmup=2, steps=3, repeats=4),
                       progress=lambda phase, **figures: events.append((phase, figures)))
    assert [phase for phase, _ in events] == ["first_step", "warmup", "block", "block", "block", "block"]
    assert events[1][1]["first_step_s"] == timing.first_step_s
    blocks = [figures for phase, figures in events if phase == "block"]
    assert [b["block"] for b in blocks] == [1, 2, 3, 4] and all(b["repeats"] == 4 for b in blocks)
    assert blocks[-1]["rate"] == pytest.approx(stats.median(timing.rates(1.0)))
    assert blocks[0]["block_s"] == timing.wall_s[0]


def test_the_stop_rule_reads_the_measure_block_and_names_why_the_loop_ends():
    fixed = StopRule.of(Measure(repeats=3))
    assert (fixed.repeats, fixed.max_repeats, fixed.adaptive) == (3, 3, False)
    adaptive = StopRule.of(Measure(repeats=2, min_time_s=1.0))
    assert (adaptive.max_repeats, adaptive.adaptive) == (20, True)
    timing = Timing(first_step_s=0.1, steps_per_block=1, blocks=[BlockTime(wall_s=0.3)])
    assert fixed.stop_reason(timing, 1.0) is None and adaptive.stop_reason(timing, 1.0) is None
    timing.blocks += [BlockTime(wall_s=0.3), BlockTime(wall_s=0.3)]
    assert fixed.stop_reason(timing, 1.0) == "repeats" and adaptive.stop_reason(timing, 1.0) is None
    timing.blocks.append(BlockTime(wall_s=0.3))
    assert adaptive.stop_reason(timing, 1.0) == "min_time"
    capped = StopRule(repeats=2, max_repeats=4, min_time_s=100.0)
    assert capped.stop_reason(timing, 1.0) == "max_repeats"


def test_the_warm_up_is_timed_and_a_compile_that_lands_there_is_said(monkeypatch):
    """A second compile in the warm-up (torch.compile under GradScaler compiles the optimizer's branch at the
    first step the scaler lets through) is left out of first_step_s: the warm-up's wall time says it happened."""
    import time

    from harness.timing import loop as measure

    monkeypatch.setattr(measure, "WARMUP_OVERRUN_S", 0.05)
    calls = []

    def step():
        calls.append(1)
        if len(calls) == 3:  # the second warm-up call does one-time work
            time.sleep(0.08)

    timing = run_timed(step, ScriptedClock(itertools.repeat(0.001)), Measure(warmup=4, steps=1, repeats=2))
    assert timing.warmup_calls == 4 and timing.warmup_s >= 0.08
    assert timing.fields()["warmup_s"] == timing.warmup_s
    # the scripted first step took 5 s: 0.08 s over four timed calls is under 15% of it
    assert timing.warmup_overrun() is None
    timing.first_step_s = 0.2
    warning = timing.warmup_overrun()
    assert warning and "4 call(s)" in warning and "first_step_s (0.2 s) leaves out" in warning

    steady = run_timed(lambda: None, ScriptedClock(itertools.repeat(0.001)), Measure(warmup=4, steps=1, repeats=2))
    steady.first_step_s = 0.2
    assert steady.warmup_overrun() is None  # a warm-up as long as its calls: nothing to say
    none = run_timed(lambda: None, ScriptedClock(itertools.repeat(0.001)), Measure(warmup=0, steps=1, repeats=2))
    assert none.warmup_calls == 0 and none.warmup_overrun() is None


def test_a_warm_up_overrun_reaches_the_records_warnings(monkeypatch):
    from harness.seam.adapter import RunContext
    from harness.timing import loop as measure
    from harness.worker.figures import TimedRun, figures
    from harness.workloads.gemm import GEMM

    params = GEMM.validate({"size": 64})
    timing = Timing(first_step_s=10.0, steps_per_block=2, blocks=[BlockTime(0.2), BlockTime(0.2)],
                    warmup_s=5.5, warmup_calls=5)
    ctx = RunContext()
    figures(GEMM, params, TimedRun(timing, 1.0, {}, {}, {}, None), "cpu", None, {}, ctx)
    assert any("the warm-up took 5.5 s for 5 call(s), 5.0 s more" in w for w in ctx.warnings)
    monkeypatch.setattr(measure, "WARMUP_OVERRUN_SHARE", 0.6)  # 5 s is under 60% of a 10 s first step
    ctx = RunContext()
    figures(GEMM, params, TimedRun(timing, 1.0, {}, {}, {}, None), "cpu", None, {}, ctx)
    assert not any("warm-up took" in w for w in ctx.warnings)


class StepClock:
    """Virtual time: each step takes `step_s`, except the ones `slow` names (their index among every step run,
    the first step 0), which take `slow_s`."""

    def __init__(self, step_s, slow=(), slow_s=0.0):
        self.now, self.calls, self.step_s, self.slow, self.slow_s = 0.0, 0, step_s, set(slow), slow_s

    def step(self):
        self.now += self.slow_s if self.calls in self.slow else self.step_s
        self.calls += 1

    def sync(self):
        pass

    def start(self):
        return self.now

    def stop(self, token):
        return BlockTime(self.now - token)


@pytest.mark.parametrize("slow", [{1}, {2}, {1, 2}])
def test_one_slow_calibration_call_does_not_decide_the_block_length(slow):
    # a 0.2 ms GEMM step on a loaded machine once timed 23.5 ms alone: 10 steps a block, blocks of 2 ms for 0.2 s
    clock = StepClock(0.0002, slow=slow, slow_s=0.0235)  # call 0 is the first step, then calibration (warmup 0)
    timing = run_timed(clock.step, clock, Measure(warmup=0, steps="auto", repeats=5, min_block_s=0.2))
    assert len(timing.blocks) == 5 and all(b.wall_s >= 0.2 for b in timing.blocks), timing.wall_s
    chosen = timing.fields()["steps_chosen"]
    assert chosen["steps"] == timing.steps_per_block >= 1000
    assert len(chosen["calibration_runs_s"]) >= 2  # the rule is recorded: the runs whose median decided
    if slow == {1, 2}:  # two slow calls of three fool the median: the first block is re-checked and the steps raised
        assert chosen["raised"][0]["from"] < chosen["raised"][0]["to"] == timing.steps_per_block


def test_a_block_that_falls_short_of_min_block_s_raises_the_steps_and_is_dropped():
    clock = StepClock(0.001)
    timing = run_timed(clock.step, clock, Measure(warmup=0, steps="auto", repeats=3, min_block_s=0.2))
    assert "raised" not in timing.calibration and timing.steps_per_block == 220
    slow_then_fast = StepClock(0.0001, slow=set(range(1, 4)), slow_s=0.05)  # calibration all slow, then fast
    timing = run_timed(slow_then_fast.step, slow_then_fast, Measure(warmup=0, steps="auto", repeats=3,
                                                                     min_block_s=0.2))
    assert all(b.wall_s >= 0.2 for b in timing.blocks) and len(timing.blocks) == 3, timing.wall_s
    assert [r["from"] for r in timing.calibration["raised"]] == [5]
