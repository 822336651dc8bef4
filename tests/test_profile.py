"""The profile breakdown's rules and arithmetic, framework-free: each backend's table on kernel and op names
from real profiles (tests/fixtures/profile_kernels.json), how overlap and idle are counted, a failing
profiler, the `measure.profile` field and the record's `profile`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from backends.tensorflow.profile import TF_RULES
from backends.torch.profile import TORCH_RULES, spans_of_trace
from harness.errors import InputError
from harness.results.record import FIELDS, Result
from harness.scenario.load import load_scenario
from harness.timing.profile import (
    CLASSES,
    MAX_PROFILED_CALLS,
    PERTURBED_PCT,
    PROFILED_STEPS,
    BreakdownVerdict,
    Capture,
    Rules,
    Span,
    TraceProfiler,
    breakdown,
    capture_trace,
    covered_shares,
    profile_run,
    profiled_calls,
)
from harness.timing.xspace import XEvent, gpu_spans, host_op_spans, window_of

# the JAX plugin's table is checked from its source, whether or not the plugin is installed in this era
PLUGIN = Path(__file__).resolve().parent.parent / "plugins" / "harness-jax"
if str(PLUGIN) not in sys.path:
    sys.path.append(str(PLUGIN))
from harness_jax.rules import JAX_RULES  # noqa: E402  (after the plugin's source is on the path)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TABLES = {"torch": TORCH_RULES, "tensorflow": TF_RULES, "jax": JAX_RULES}
NAMES = json.loads((FIXTURES / "profile_kernels.json").read_text())["names"]
CASES = [(table, entry["name"], entry["class"]) for entry in NAMES for table in entry["tables"]]


@pytest.mark.parametrize("table,name,expected", CASES, ids=[f"{t}-{n[:40]}" for t, n, _ in CASES])
def test_each_backend_table_classes_real_kernel_and_op_names(table, name, expected):
    assert TABLES[table].classify(name) == expected


def test_every_class_is_reached_by_the_fixtures_and_unknown_names_are_other():
    assert {entry["class"] for entry in NAMES} == set(CLASSES)
    assert all(rules.classify("some_kernel_nobody_named") == "other" for rules in TABLES.values())


def test_a_table_naming_an_unknown_class_is_refused():
    with pytest.raises(ValueError, match="unknown breakdown classes"):
        Rules([("flops", "gemm")])


RULES = Rules([("conv", "conv"), ("matmul", "gemm"), ("copy", "memcpy")])


def capture(spans, window=(0.0, 10.0), steps=2, activity="gpu") -> Capture:
    return Capture(source="test", activity=activity, spans=spans, window=window, steps=steps, rules=RULES)


def test_overlapping_spans_are_counted_once_and_shared_while_they_overlap():
    spans = [Span("conv_a", 0.0, 4.0), Span("memcpy", 2.0, 6.0)]
    assert covered_shares(spans, (0.0, 10.0)) == pytest.approx([3.0, 3.0])
    out = breakdown(capture(spans), timed_step_s=5.0)
    assert out["busy_s"] == pytest.approx(3.0)  # 6 s covered over 2 steps
    assert out["overlap_s"] == pytest.approx(1.0)  # 8 s of own time, 6 covered
    assert out["classes_s"]["conv"] == pytest.approx(1.5) and out["classes_s"]["copy"] == pytest.approx(1.5)


def test_idle_is_the_window_covered_by_no_span_and_classes_plus_idle_make_the_step():
    spans = [Span("conv_a", 1.0, 2.0), Span("gemm_b", 3.0, 5.0), Span("mystery", 5.0, 6.0), Span("late", 11.0, 12.0)]
    out = breakdown(capture(spans), timed_step_s=4.0)
    assert out["step_s"] == pytest.approx(5.0)
    assert out["idle_s"] == pytest.approx(3.0)  # 0-1, 2-3, 6-10: 6 s over 2 steps; the span after the window is out
    assert sum(out["classes_s"].values()) + out["idle_s"] == pytest.approx(out["step_s"])
    assert out["other_share"] == pytest.approx(0.25)
    assert out["vs_timed_pct"] == pytest.approx(25.0)
    # the profiled step is 25% longer than the timed one: the profiler slowed the host, so whether the timed
    # step waits on it is read from the timed step less the kernels' busy time (4 - 2 of 4 s)
    assert out["perturbed"] is True and out["idle_basis"] == "timed step less busy"
    assert out["host_bound"] is True and out["gpu_idle_fraction"] == pytest.approx(0.5)
    assert "25% longer than the timed one" in BreakdownVerdict.model_validate(out).perturbed_warning()
    assert out["top"][0] == {"name": "gemm_b", "class": "matmul", "count_per_step": 0.5, "ms_per_step": 1000.0}
    # within PERTURBED_PCT of the timed step the timeline's idle answers (3 of 5 s), and nothing is flagged
    same = breakdown(capture(spans), timed_step_s=5.0 / (1 + PERTURBED_PCT / 200))
    assert same["perturbed"] is False and same["idle_basis"] == "timeline"
    assert same["gpu_idle_fraction"] == pytest.approx(0.6) and BreakdownVerdict.model_validate(same).perturbed_warning() is None


def test_a_profiler_that_slows_the_host_does_not_make_a_gpu_bound_step_launch_bound():
    # kernels back to back for 9 of each 10 s profiled, but the timed step is 9.2 s: the gaps are the profiler's
    spans = [Span("conv_a", 0.0, 9.0), Span("gemm_b", 10.0, 19.0)]
    out = breakdown(capture(spans, window=(0.0, 20.0)), timed_step_s=9.2)
    assert out["idle_s"] == pytest.approx(1.0)  # the timeline's idle stays what the timeline shows
    assert out["host_bound"] is False and BreakdownVerdict.model_validate(out).launch_bound_warning() is None
    assert out["gpu_idle_fraction"] == pytest.approx(0.2 / 9.2)


def test_a_run_profiles_a_timed_blocks_worth_of_calls_within_bounds():
    assert profiled_calls(None) == PROFILED_STEPS and profiled_calls(2) == PROFILED_STEPS
    assert profiled_calls(40) == 40
    assert profiled_calls(10**6) == MAX_PROFILED_CALLS


def test_a_cpu_breakdown_says_nothing_of_the_gpu_waiting():
    out = breakdown(capture([Span("conv", 0.0, 10.0)], activity="cpu"), timed_step_s=None)
    assert "host_bound" not in out and out["vs_timed_pct"] is None and out["idle_s"] == 0.0


def test_a_failing_profiler_gives_its_reason_and_never_raises():
    def broken(steps, where):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    warnings: list[str] = []
    out = profile_run(broken, 0.1, None, warnings)
    assert out == {"error": "RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"}
    assert warnings == ["no profile breakdown: RuntimeError: CUPTI_ERROR_NOT_INITIALIZED"]


def test_a_launch_bound_gpu_step_is_warned_of_from_the_breakdown():
    warnings: list[str] = []
    out = profile_run(lambda steps, where: capture([Span("conv", 0.0, 2.0)], steps=1), 10.0, None, warnings)
    assert out["host_bound"] and warnings and warnings[0].startswith("launch-bound: the GPU is idle 80%")


def fake_profiler(calls: list, spans: list[Span], activity: str = "cpu") -> TraceProfiler:
    """A profiler that writes its 'trace' (the steps it ran) into the folder it is given and reads `spans` back."""

    def record(step, sync, steps, folder):
        for _ in range(steps):
            step()
        sync()
        path = Path(folder) / "trace.txt"
        path.write_text(" ".join(calls))
        return str(path), ["a note"]

    def read(path):
        assert Path(path).read_text() == "step sync step step sync"  # one warm-up step, waited for, before recording
        calls.append("read")
        return spans, (0.0, 1.0)

    return TraceProfiler(name="fake", source="fake: ops", activity=activity, rules=RULES, record=record, read=read)


def test_a_trace_capture_warms_up_keeps_the_trace_only_where_asked_and_refuses_an_empty_one(tmp_path):
    calls: list[str] = []
    step, sync = (lambda: calls.append("step")), (lambda: calls.append("sync"))
    kept = capture_trace(fake_profiler(calls, [Span("conv", 0.1, 0.2)]), step, sync, 2, str(tmp_path / "traces"))
    assert calls[-1] == "read" and kept.trace == str(tmp_path / "traces" / "trace.txt") and Path(kept.trace).exists()
    assert (kept.source, kept.activity, kept.steps, kept.notes, kept.window) == ("fake: ops", "cpu", 2, ["a note"],
                                                                                 (0.0, 1.0))
    calls.clear()
    scratch = capture_trace(fake_profiler(calls, [Span("conv", 0.1, 0.2)]), step, sync, 2, None)
    assert scratch.trace is None and calls[-1] == "read"
    calls.clear()
    with pytest.raises(RuntimeError, match=r"fake saw nothing in the profiled steps \(fake: ops\); is CUPTI"):
        capture_trace(fake_profiler(calls, [], activity="gpu"), step, sync, 2, None)


def test_torch_trace_gives_kernels_within_the_window_annotation(tmp_path):
    trace = {"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "harness.profiled_steps", "ts": 100, "dur": 50, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 101, "dur": 10, "tid": 1},
        {"ph": "X", "cat": "cpu_op", "name": "aten::convolution", "ts": 102, "dur": 8, "tid": 1},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_fprop_implicit_gemm", "ts": 120, "dur": 5,
         "args": {"stream": 7}},
    ]}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    spans, window = spans_of_trace(str(path), gpu=True)
    assert [s.name for s in spans] == ["sm90_xmma_fprop_implicit_gemm"] and window == pytest.approx((1e-4, 1.5e-4))
    spans, _ = spans_of_trace(str(path), gpu=False)
    assert [s.name for s in spans] == ["aten::conv2d"]  # the nested aten::convolution is part of it


def test_xspace_spans_are_a_gpus_stream_events_or_the_hosts_ops():
    events = [XEvent("/host:CPU", "python", "harness.profiled_steps", 0, 100),
              XEvent("/host:CPU", "tf_Compute", "conv1/Conv2D:Conv2D", 10, 20, kind="Conv2D"),
              XEvent("/host:CPU", "tf_Compute", "convolution.4", 40, 20, kind="convolution.4"),
              XEvent("/device:GPU:0", "Stream #14(Compute)", "loop_add_fusion", 30, 5),
              XEvent("/device:GPU:0", "XLA Ops", "add.1", 30, 5)]
    assert window_of(events, "harness.profiled_steps") == (0.0, 1e-7)
    assert [s.name for s in gpu_spans(events, 0)] == ["loop_add_fusion"]
    assert [s.name for s in host_op_spans(events)] == ["Conv2D", "convolution"]


def test_measure_profile_takes_a_boolean_only(tmp_path):
    path = tmp_path / "s.yaml"
    base = "name: t\nworkload: gemm\nparams: {size: 64}\nbackends: [torch]\ndevices: [cpu]\nmeasure: {profile: %s}\n"
    path.write_text(base % "true")
    assert load_scenario(path).measure.profile is True
    path.write_text(base % "3")
    with pytest.raises(InputError) as info:
        load_scenario(path)
    assert "measure.profile" in str(info.value) and "s.yaml" in str(info.value)


def test_profile_is_a_record_field_kept_through_a_row():
    assert "profile" in FIELDS and not Result().profile and Result().to_dict()["profile"] == {}
    record = Result.from_dict({"profile": {"classes_s": {"conv": 0.01}, "idle_s": 0.002}})
    assert Result.from_dict(record.to_dict()).profile.classes_s == {"conv": 0.01}


def test_a_device_without_a_profiler_says_so_in_the_record():
    from harness.seam.adapter import DeviceDefaults

    warnings: list[str] = []
    out = profile_run(lambda steps, where: DeviceDefaults().profile(lambda: None, steps, where), 0.1, None, warnings)
    assert out["error"].startswith("Unsupported: this backend has no profiler hook")


def test_a_large_unclassified_share_is_warned_of_with_the_names_to_add():
    warnings: list[str] = []
    spans = [Span("conv_a", 0.0, 1.0), Span("fancy_new_kernel", 1.0, 2.0)]
    profile_run(lambda steps, where: capture(spans, window=(0.0, 2.0), steps=1, activity="cpu"), 2.0, None, warnings)
    assert warnings == ["profile: 50% of the busy time matched no rule of the backend's table (other), "
                        "e.g. fancy_new_kernel"]


def test_fused_attention_is_its_own_class_and_the_explicit_path_is_matmul_reduce_and_elementwise():
    cudnn = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0"
    assert all(rules.classify(cudnn) == "attention" for rules in TABLES.values())  # not a convolution (fprop)
    assert TORCH_RULES.classify("aten::scaled_dot_product_attention") == "attention"
    explicit = {"aten::matmul": "matmul", "aten::softmax": "reduce", "aten::masked_fill": "elementwise"}
    assert {name: TORCH_RULES.classify(name) for name in explicit} == explicit
    assert TF_RULES.classify("_MklBatchMatMulV2") == "matmul" and TF_RULES.classify("_MklSoftmax") == "reduce"
    assert CLASSES.index("attention") == CLASSES.index("matmul") + 1
