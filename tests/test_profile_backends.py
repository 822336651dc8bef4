"""A profiled CPU run of each backend gives a well-formed breakdown; profiling off leaves the record as it was.

Tiny sizes (ResNet-50 at 32x32 or 64x64 images, batch 2, one timed step a block): the breakdown's shape and
its arithmetic are what is checked here, not the CPU's figures. TensorFlow and JAX are imported by the
runs, never when this file is collected (tests/test_tf_backend.py says why).
"""

from __future__ import annotations

import importlib.util
import re

import pytest

from harness.seam.backend import available_backends
from harness.timing.profile import CLASSES, PROFILED_STEPS
from tests.specs import backend_spec, run_backend

MEASURE = {"warmup": 0, "steps": 1, "repeats": 2}
TINY = {"batch_size": 2, "image_size": 32, "num_classes": 10}


def profiled(backend: str, params: dict, **measure) -> dict:
    spec = backend_spec(backend, "resnet50_train", {**TINY, **params}, {**MEASURE, "profile": True, **measure})
    return run_backend(available_backends()[backend], spec)


def assert_well_formed(profile: dict, source: str, conv_op: str) -> None:
    assert "error" not in profile, profile.get("error")
    assert profile["activity"] == "cpu" and profile["source"].startswith(source)
    assert set(profile["classes_s"]) == set(CLASSES)
    assert all(v >= 0 for v in profile["classes_s"].values()) and profile["idle_s"] >= 0
    # idle is measured, not a remainder: the classes plus idle make the profiled window's step exactly
    assert sum(profile["classes_s"].values()) + profile["idle_s"] == pytest.approx(profile["step_s"], rel=1e-6)
    assert profile["classes_s"]["conv"] > 0
    assert profile["steps"] >= 1 and profile["timed_step_s"] > 0 and profile["vs_timed_pct"] is not None
    # TensorFlow with oneDNN (its default on CPUs with AVX-512) runs the op under its own name,
    # _MklNativeConv2DBackpropInput for Conv2DBackpropInput
    assert conv_op in [re.sub(r"^_Mkl(Native)?", "", k["name"]) for k in profile["top"]]
    assert 0 <= profile["other_share"] < 0.2


def test_torch_cpu_run_profiled(tmp_path):
    result = profiled("torch", {}, profile_trace_dir=str(tmp_path))
    assert_well_formed(result["profile"], "torch.profiler", "aten::convolution_backward")
    assert result["profile"]["trace"].startswith(str(tmp_path))  # the raw trace, kept where asked
    assert result["status"] == "ok" and len(result["samples"]) == 2
    assert 0 < result["profile"]["host_peak_rss_before_bytes"]


def test_torch_turns_its_python_side_launch_events_off_within_the_window_and_back_on():
    pytest.importorskip("torch")
    from torch.autograd import profiler as autograd_profiler
    from torch.profiler import ProfilerActivity, profile

    from backends.torch.profile import launch_events_off

    if not hasattr(autograd_profiler, "_set_is_profiler_enabled"):  # torch 2.0: nothing there to turn off
        with launch_events_off() as turned_off:
            assert turned_off is False
        return
    with profile(activities=[ProfilerActivity.CPU]):
        assert autograd_profiler._is_profiler_enabled  # what makes torch.compile's launcher annotate each launch
        with launch_events_off() as turned_off:
            inside = autograd_profiler._is_profiler_enabled
        after = autograd_profiler._is_profiler_enabled
    assert turned_off is True and inside is False and after is True
    assert not autograd_profiler._is_profiler_enabled  # the profiler's own stop clears it as before


def test_profiling_off_leaves_the_record_without_a_profile():
    spec = backend_spec("torch", "resnet50_train", TINY, MEASURE)
    result = run_backend(available_backends()["torch"], spec)
    assert "profile" not in result and result["status"] == "ok"
    assert not any(k in result["timing"] for k in ("device_busy_step_s", "gpu_idle_fraction", "host_bound"))


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")
@pytest.mark.parametrize("execution", ["graph", "eager"])
def test_tensorflow_cpu_run_profiled(execution):
    # graph: the ops' `name:Type` events on the executor's threads; eager: the eager runtime's event around each
    # op run on the calling thread (a tf.function's call is not an op of its own)
    result = profiled("tensorflow", {"image_size": 64, "memory_format": "channels_last", "execution": execution})
    assert_well_formed(result["profile"], "tf.profiler", "Conv2DBackpropInput")
    assert not any(k["name"].startswith("__inference") for k in result["profile"]["top"])
    assert result["profile"]["trace"] is None  # not asked to keep it


@pytest.mark.skipif("jax" not in available_backends() or importlib.util.find_spec("flax") is None,
                    reason="the JAX plugin is installed in the current era only (the reference era has no harness-jax "
                           "and no flax)")
def test_jax_cpu_run_profiled():
    result = profiled("jax", {"execution": "compiled"})
    assert_well_formed(result["profile"], "jax.profiler", "convolution")


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None, reason="tensorflow is not installed")
def test_tensorflow_default_profile_counts_training_steps_not_fit_calls():
    # one call of the default path's step is Keras's fit over k steps: the breakdown is per training step
    spec = backend_spec("tensorflow", "resnet50_train",
                        {**TINY, "image_size": 64, "memory_format": "channels_last", "execution": "default"},
                        {**MEASURE, "profile": True}, options={"fit_steps": 4})
    result = run_backend(available_backends()["tensorflow"], spec)
    profile = result["profile"]
    assert_well_formed(profile, "tf.profiler", "Conv2DBackpropInput")
    assert profile["steps"] == PROFILED_STEPS * 4
    assert 0.4 < profile["step_s"] / profile["timed_step_s"] < 2.5  # the same unit as the timed step, not k of them
