"""`execution: default`: what each framework's users train with, resolved by each backend and recorded.

The core's half (a step that runs k training steps per call is timed as k steps), the declarations (a backend
that does not declare the mode answers `unsupported`), Keras's own resolution of `compile()`'s defaults, and one
session through `harness run` with torch, Keras 3 and tf_keras (the Keras choice is read at import, so each
TensorFlow run needs a worker process of its own). Tiny sizes: 32 px images, batch 2, a step or two.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.seam.backend import Backend
from harness.timing.loop import BlockTime, Timing, run_timed
from harness.timing.settings import Measure
from harness.workloads import technique_values

ROOT = Path(__file__).resolve().parent.parent
HAVE_TF = importlib.util.find_spec("tensorflow") is not None
HAVE_BOTH = HAVE_TF and importlib.util.find_spec("torch") is not None
TINY = {"batch_size": 2, "image_size": 32, "memory_format": "channels_last", "execution": "default"}


# --- the core: k training steps per call --------------------------------------------------------------


class CountingClock:
    """A clock whose every region lasts one second, so rates are exact."""

    def __init__(self):
        self.now = 0.0

    def sync(self):
        pass

    def start(self):
        return self.now

    def stop(self, token):
        self.now += 1.0
        return BlockTime(1.0)


def test_a_step_of_k_training_steps_is_timed_as_k_steps():
    calls = []
    timing = run_timed(lambda: calls.append(1), CountingClock(), Measure(warmup=1, steps=3, repeats=2),
                       work_per_step=4.0, steps_per_call=5)
    assert len(calls) == 1 + 1 + 3 * 2  # first, warm-up, two blocks of three calls: steps count calls
    assert timing.steps_per_call == 5
    assert timing.rates(4.0) == [4.0 * 3 * 5, 4.0 * 3 * 5]  # images per training step x 15 steps per second
    assert timing.step_time_s() == pytest.approx(1.0 / 15)
    assert timing.fields()["steps_per_call"] == 5


def test_one_step_per_call_keeps_the_record_as_it_was():
    timing = Timing(first_step_s=0.1, steps_per_block=2, blocks=[BlockTime(1.0)])
    assert timing.rates(3.0) == [6.0] and "steps_per_call" not in timing.fields()


# --- declarations --------------------------------------------------------------------------------------


class Undeclared(Backend):
    """A plugin that maps every technique harness lists for it, and says nothing of `default`."""

    name = "undeclared"
    workloads = {"resnet50_train": technique_values("resnet50_train")}


def test_a_backend_that_does_not_declare_default_answers_unsupported_with_the_reason():
    assert "default" not in technique_values("resnet50_train")["execution"]
    assert "default" in technique_values("resnet50_train", default_execution=True)["execution"]
    reason = Undeclared().unsupported_reason("resnet50_train", {"execution": "default"}, "cpu")
    assert reason and "does not declare execution: default" in reason
    assert Undeclared().unsupported_reason("resnet50_train", {"execution": "eager"}, "cpu") is None


def test_the_bundled_backends_declare_default_for_training_and_not_for_gemm():
    from backends.tensorflow import TensorFlowBackend
    from backends.torch import TorchBackend

    for backend in (TorchBackend(), TensorFlowBackend()):
        assert backend.unsupported_reason("resnet50_train", {**TINY, "precision": "fp32"}, "cpu", {}) is None
        reason = backend.unsupported_reason("gemm", {"size": 8, "execution": "default"}, "cpu", {})
        assert reason and "does not declare execution: default for gemm" in reason


def test_keras_fit_refuses_what_a_keras_user_does_not_get_by_default():
    from backends.tensorflow import FIT_GRAD_ACCUM as GRAD_ACCUM
    from backends.tensorflow import FIT_REPLICAS as REPLICAS
    from backends.tensorflow import OPTIMIZER_JIT_KERAS3, TensorFlowBackend

    tf = TensorFlowBackend()
    assert tf.unsupported_reason("resnet50_train", {**TINY, "grad_accum": 2}, "cpu", {}) == GRAD_ACCUM
    assert tf.unsupported_reason("resnet50_train", {**TINY, "replicas": 2}, "cpu", {}) == REPLICAS
    assert tf.unsupported_reason("resnet50_train", {**TINY, "execution": "graph", "grad_accum": 2}, "cpu", {}) is None
    if tf.keras_choice({"keras": "keras3"}) == "keras3" and tf.unsupported_reason(
            "resnet50_train", TINY, "cpu", {"keras": "keras3"}) is None:
        assert tf.unsupported_reason("resnet50_train", TINY, "cpu",
                                     {"keras": "keras3", "optimizer_jit_compile": True}) == OPTIMIZER_JIT_KERAS3


def test_an_unknown_execution_or_option_value_is_bad_input_naming_the_field(tmp_path):
    for text, field in (("params: {execution: defaults}", "params.execution"),
                        ("options: {tensorflow: {fit_steps: 0}}", "options.tensorflow"),
                        ("options: {torch: {cudnn_benchmark: maybe}}", "options.torch")):
        path = tmp_path / "bad.yaml"
        path.write_text(f"name: x\nworkload: resnet50_train\n{text}\n")
        proc = subprocess.run([sys.executable, "-m", "harness", "validate", str(path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert f"`{field}`" in proc.stderr and "Traceback" not in proc.stderr


# --- torch's cudnn.benchmark: harness's choice, torch's default, the option -------------------------------


def test_cudnn_benchmark_follows_torch_under_default_and_the_option_everywhere():
    from backends.torch.train import cudnn_benchmark_choice

    assert cudnn_benchmark_choice("default", None, False)[0] is False  # torch's own default
    assert cudnn_benchmark_choice("eager", None, False)[0] is True  # harness's choice in the other modes
    assert cudnn_benchmark_choice("default", True, False)[0] is True
    assert cudnn_benchmark_choice("compiled", False, False)[0] is False
    assert cudnn_benchmark_choice("eager", True, True)[0] is False  # a capacity probe never autotunes


# --- Keras's own resolution of compile()'s defaults ----------------------------------------------------


def tiny_model(keras):
    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(3)])


@pytest.mark.skipif(not HAVE_TF, reason="tensorflow is not installed")
@pytest.mark.parametrize("gpu_visible", [False, True])
def test_compile_at_defaults_records_what_keras_resolves(monkeypatch, gpu_visible):
    import tensorflow as tf

    from backends.tensorflow import compat
    from backends.tensorflow.fit import compile_at_defaults
    from harness.workloads.training import OptimizerSpec

    if gpu_visible:  # what Keras sees on a GPU machine: its resolution, not harness's, decides XLA
        gpu = SimpleNamespace(name="/physical_device:GPU:0", device_type="GPU")
        real = tf.config.list_physical_devices
        for config in (tf.config, tf.compat.v2.config):  # Keras 2 reads it through tensorflow.compat.v2
            monkeypatch.setattr(config, "list_physical_devices",
                                lambda kind=None: [gpu] if kind in (None, "GPU") else real(kind))
    resolved = compile_at_defaults(tiny_model(compat.keras), OptimizerSpec("sgd", lr=0.01, momentum=0.9))
    assert resolved["steps_per_execution"] == 1
    if compat.is_keras3():
        # keras/src/trainers/trainer.py _resolve_auto_jit_compile: off on a CPU-only machine, on with a GPU
        assert resolved["jit_compile"] is gpu_visible
        assert resolved["optimizer_jit_compile"] is None  # Keras 3's optimizers compile nothing themselves
    else:
        # Keras 2 (tf_keras, tf.keras 2.12): compile leaves XLA off; the optimizer compiles its update on a GPU
        assert resolved["jit_compile"] is False
        assert resolved["optimizer_jit_compile"] is gpu_visible
        # the other modes: off unless the option asks (tensorflow.optimizer_jit_compile)
        assert compat.sgd(0.01, 0.9)[0].jit_compile is False
        assert compat.sgd(0.01, 0.9, True)[0].jit_compile is gpu_visible


# --- one session: torch, Keras 3, tf_keras -------------------------------------------------------------


def run_session(tmp_path) -> list[dict]:
    path = tmp_path / "defaults.yaml"
    path.write_text(f"""
name: defaults-tiny
workload: resnet50_train
params: {json.dumps({**TINY, "num_classes": 10})}
measure: {{warmup: 0, steps: 1, repeats: 2, processes: 1}}
backends: [torch, tensorflow]
devices: [cpu]
options: {{tensorflow: {{fit_steps: 3}}}}
sweep: {{tensorflow.keras: [keras3, tf_keras]}}
""")
    db = tmp_path / "h.db"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--store", str(db), "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr
    out = subprocess.run([sys.executable, "-m", "harness", "results", "--store", str(db), "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict:
    records = run_session(tmp_path_factory.mktemp("defaults"))
    return {(r["backend"], (r.get("options") or {}).get("keras")): r for r in records}


def assert_timed_as_steps(record: dict, steps_per_call: int) -> None:
    timing = record["timing"]
    assert timing.get("steps_per_call", 1) == steps_per_call
    images = record["params"]["batch_size"] * timing["steps_per_block"] * steps_per_call
    assert record["samples"] == pytest.approx([images / wall for wall in timing["block_wall_s"]])
    assert record["step_time_s"] == pytest.approx(
        statistics.median(w / (timing["steps_per_block"] * steps_per_call) for w in timing["block_wall_s"]))


@pytest.mark.skipif(not HAVE_BOTH, reason="needs torch and tensorflow")
def test_torch_default_is_its_eager_step_with_torchs_own_settings(session):
    record = session[("torch", None)]
    assert record["status"] == "ok", record.get("error")
    assert record["api"]["execution"].startswith("default -> eager")
    assert_timed_as_steps(record, 1)


@pytest.mark.skipif(not HAVE_BOTH, reason="needs torch and tensorflow")
def test_keras_default_is_fit_at_keras_defaults_timed_as_k_steps_per_call(session):
    from backends.tensorflow import TensorFlowBackend

    ran = 0
    for keras in ("keras3", "tf_keras"):
        record = session[("tensorflow", keras)]
        if TensorFlowBackend().unsupported_reason("resnet50_train", TINY, "cpu", {"keras": keras}):
            assert record["status"] == "unsupported"  # Keras 3 before TF 2.16: the reference era
            continue
        ran += 1
        assert record["status"] == "ok", record.get("error")
        assert record["api"]["execution"].startswith("default -> model.fit")
        assert_timed_as_steps(record, 3)
        fit = record["timing"]["fit"]
        # a CPU-only machine: Keras 3 resolves jit_compile="auto" to False, Keras 2 leaves it off
        assert fit["jit_compile"] is False and fit["steps_per_execution"] == 1 and fit["steps_per_epoch"] == 3
        assert fit["optimizer_jit_compile"] is (None if keras == "keras3" else False)
        assert "jit_compile='auto' -> False" in record["api"]["execution"] or keras == "tf_keras"
        assert record["checks"]["model_parameters"] == record["checks"]["model_parameters_expected"]
    assert ran >= 1
    # the same inputs on both frameworks
    fingerprints = {r["checks"].get("inputs_fingerprint") for r in session.values() if r["status"] == "ok"}
    assert len(fingerprints) == 1


def test_the_bundled_defaults_scenario_plans_each_framework_s_default_path():
    from harness.scenario.bundled import resolve_scenario_path
    from harness.scenario.load import load_scenarios
    from harness.session.plan import build_plan

    (scenario,) = load_scenarios(resolve_scenario_path("defaults"), [])
    plan = [s for s in build_plan(scenario, "s") if s.replicate == 0]
    assert {s.params["execution"] for s in plan} == {"default"}
    # each framework's default path fed from host memory on every side (Keras fit copies a device batch each step)
    assert sorted((s.backend, s.options.get("keras"), s.params["inputs"]) for s in plan) == [
        ("tensorflow", "keras3", "host"), ("tensorflow", "tf_keras", "host"), ("torch", None, "host")]
    (train,) = load_scenarios(resolve_scenario_path("resnet50_train"), [])
    assert {s.params["execution"] for s in build_plan(train, "s")} == {"default"}  # never TF eager by default


# --- compare pairs the default paths like any other mode -------------------------------------------------


def test_compare_by_backend_pairs_default_with_default_and_never_with_another_mode(tmp_path):
    from harness.results.compare import compare
    from harness.results.store import load_results
    from tests.test_compare import processes, store_records

    path = store_records(tmp_path / "h.db",
                         processes(1000.0, backend="torch", seed=1, execution="default")
                         + processes(3000.0, backend="tensorflow", seed=2, execution="default")
                         + processes(900.0, backend="tensorflow", seed=3, execution="graph"))
    table = compare(load_results(path), ["backend"], baseline="torch")
    assert len(table) == 1  # torch has no graph record: the graph one pairs with nothing
    row = table.iloc[0]
    assert (row["baseline"], row["value"]) == ("torch", "tensorflow")
    assert row["ratio"] == pytest.approx(3.0, rel=0.02)
