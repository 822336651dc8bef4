"""mlp_train through the TensorFlow backend on the CPU: the Keras part (harness_mlp.keras_part) trained by the
backend's trainer in-process, then `harness run` as a user runs it (processes, precisions, a profile, a capacity
search), each run its own worker. Tiny sizes: a few features, a few steps."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PLUGIN = Path(__file__).resolve().parent.parent
ROOT = PLUGIN.parent.parent
# harness and the plugin's source on the path, and the workload found without installing the plugin
for _path in (str(ROOT), str(PLUGIN)):
    if _path not in sys.path:
        sys.path.insert(0, _path)
WORKLOAD = "mlp_train=harness_mlp:MLP_TRAIN"
if "mlp_train=" not in os.environ.get("HARNESS_WORKLOADS", ""):
    os.environ["HARNESS_WORKLOADS"] = ",".join(filter(None, [os.environ.get("HARNESS_WORKLOADS"), WORKLOAD]))

if importlib.util.find_spec("tensorflow") is None:
    pytest.skip("tensorflow is not installed", allow_module_level=True)

from harness_mlp import MLPParams, parameter_count  # noqa: E402

from backends.tensorflow import TensorFlowBackend  # noqa: E402
from harness.results.store import open_store  # noqa: E402
from tests.specs import backend_spec, run_backend  # noqa: E402

TINY = {"batch_size": 8, "features": 12, "hidden": 16, "layers": 2, "num_classes": 5}
ONE_BLOCK = {"warmup": 0, "steps": 2, "repeats": 1}


def train(measure: dict | None = None, options: dict | None = None, **params) -> dict:
    """One run of mlp_train through the TensorFlow backend in this process, as a worker runs it."""
    spec = backend_spec("tensorflow", "mlp_train", {**TINY, **params}, measure or ONE_BLOCK, options=options)
    return run_backend(TensorFlowBackend(), spec)


def harness(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`harness ARGS` in a subprocess whose workers find harness and the plugin's source."""
    path = os.pathsep.join(filter(None, [str(ROOT), str(PLUGIN), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)


def records(tmp_path: Path, store: str = "s.db") -> list[dict]:
    with open_store(tmp_path / store) as opened:
        return list(opened.records())


def write(tmp_path: Path, scenario: dict) -> str:
    path = tmp_path / "mlp.yaml"
    path.write_text(yaml.safe_dump({"name": "mlp-tf", "workload": "mlp_train", "backends": ["tensorflow"],
                                    "devices": ["cpu"], **scenario}, sort_keys=False), encoding="utf-8")
    return str(path)


# --- the part, trained in this process ----------------------------------------------------------------------------


def test_the_keras_part_is_layers_dense_blocks_and_a_classifier_with_the_workloads_count():
    from harness_mlp.keras_part import PART

    from backends.tensorflow import compat
    from harness.workloads.training import BuildContext

    params = MLPParams(**TINY)
    ctx = BuildContext(seed=0, framework=compat.keras)
    model = PART.build(params, ctx)
    dense = [layer for layer in model.layers if isinstance(layer, compat.keras.layers.Dense)]
    assert ctx.blocks == TINY["layers"] and len(dense) == TINY["layers"] + 1
    assert [layer.units for layer in dense] == [16, 16, 5] and all(layer.use_bias for layer in dense)
    assert all(layer.activation.__name__ == "relu" for layer in dense[:-1])
    assert dense[-1].activation.__name__ == "linear"
    assert sum(int(w.shape.num_elements()) for w in model.trainable_weights) == parameter_count(params) == 565


def test_mlp_trains_with_adamw_decaying_matrices_only_and_the_workloads_count():
    result = train()
    assert result["status"] == "ok", result.get("error")
    checks = result["checks"]
    assert checks["model_parameters"] == checks["model_parameters_expected"] == parameter_count(MLPParams(**TINY))
    assert checks["loss_last"] < checks["loss_first"]
    assert "keras.optimizers.AdamW(learning_rate=0.001, weight_decay=0.01" in result["api"]["optimizer"]
    assert "weight decay on the 3 weights of 2+ dimensions only" in result["api"]["optimizer"]
    assert result["api"]["loss"].startswith("tf.nn.sparse_softmax_cross_entropy_with_logits on float32 logits")
    assert "memory_format" not in result["api"] and result["timing"]["items_per_step"] == TINY["batch_size"]


def test_recompute_wraps_each_hidden_layer_and_trains_alike():
    plain = train(execution="graph")
    recomputed = train(execution="graph", recompute="blocks")
    assert recomputed["status"] == "ok", recomputed.get("error")
    assert recomputed["api"]["recompute"] == "tf.recompute_grad around each of the 2 blocks"
    # the same weights from the seed and the same batch: recomputing changes no number
    for key in ("loss_first", "loss_last", "parameters_sum"):
        assert recomputed["checks"][key] == pytest.approx(plain["checks"][key], rel=1e-6), key


def test_a_part_with_its_own_loss_is_trained_on_it(monkeypatch):
    import tensorflow as tf
    from harness_mlp import keras_part

    class DoubledLoss(keras_part.KerasMLP):
        def loss(self, outputs, labels):
            return 2.0 * tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=outputs))

    base = train()
    monkeypatch.setattr(keras_part, "PART", DoubledLoss())
    doubled = train()
    assert doubled["api"]["loss"].startswith("the model part's own loss")
    assert doubled["checks"]["loss_first"] == pytest.approx(2 * base["checks"]["loss_first"], rel=1e-6)


def test_keras_fit_trains_mlp_as_a_keras_user_would():
    result = train(execution="default", options={"fit_steps": 2})
    assert result["status"] == "ok", result.get("error")
    assert result["api"]["execution"].startswith("default -> model.fit")
    assert "compiled by model.compile as AdamW" in result["api"]["optimizer"]
    assert result["timing"]["steps_per_call"] == 2
    assert result["checks"]["model_parameters"] == result["checks"]["model_parameters_expected"]


# --- harness run, as a user runs it --------------------------------------------------------------------------------


def test_a_session_trains_mlp_in_two_processes_at_two_precisions(tmp_path):
    path = write(tmp_path, {"params": {**TINY, "execution": "graph"},
                            "measure": {"warmup": 1, "steps": 2, "repeats": 1, "processes": 2},
                            "sweep": {"precision": ["fp32", "amp_bf16"]}})
    proc = harness(tmp_path, "run", path, "--store", "s.db", "-q")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    found = records(tmp_path)
    assert sorted(r["params"]["precision"] for r in found) == ["amp_bf16", "amp_bf16", "fp32", "fp32"]
    expected = parameter_count(MLPParams(**TINY))
    for record in found:
        assert record["status"] == "ok", record.get("error")
        assert record["workload"] == "mlp_train" and record["unit"] == "samples/s" and record["median"] > 0
        assert record["checks"]["model_parameters"] == expected
    assert len({r["checks"]["inputs_fingerprint"] for r in found}) == 1  # the same batch in every process
    policies = {r["params"]["precision"]: r["api"]["precision"].split(";")[0] for r in found}
    assert policies["fp32"].endswith("('float32')") and policies["amp_bf16"].endswith("('mixed_bfloat16')"), policies


def test_a_profiled_run_gives_the_profile_breakdown(tmp_path):
    path = write(tmp_path, {"params": {**TINY, "execution": "graph"},
                            "measure": {"warmup": 1, "steps": 2, "repeats": 1, "processes": 1, "profile": True}})
    proc = harness(tmp_path, "run", path, "--store", "s.db", "-q")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    (record,) = records(tmp_path)
    assert record["status"] == "ok", record.get("error")
    profile = record["profile"]
    assert "error" not in profile and profile["source"].startswith("tf.profiler"), json.dumps(profile)[:2000]
    # a Dense layer's forward and backward are matrix products (oneDNN's _MklMatMul among TensorFlow's ops)
    assert profile["classes_s"]["matmul"] > 0 and profile["steps"] >= 1, json.dumps(profile)[:2000]


def test_a_capacity_search_finds_the_largest_batch_under_its_limit(tmp_path):
    path = write(tmp_path, {"params": {**TINY, "execution": "graph"},
                            "measure": {"warmup": 0, "steps": 1, "repeats": 1, "processes": 1},
                            "capacity": {"start": 4, "limit": 16, "resolution": 4}})
    proc = harness(tmp_path, "run", path, "--find-max-batch", "--store", "s.db", "-q")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    found = records(tmp_path)
    (answer,) = [r for r in found if r["metric"] == "max_batch_size"]
    assert answer["status"] == "ok", answer.get("error")
    assert answer["median"] == 16  # every probe fits on the CPU: the search stops at its limit
    assert all(r["status"] == "ok" for r in found if r is not answer)
