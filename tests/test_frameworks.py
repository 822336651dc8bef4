"""Torch against TensorFlow like with like, end to end through `harness run` (real worker processes).

The Keras choice is a TensorFlow option read at import (TF_USE_LEGACY_KERAS), so it is tested through
the runner, which gives each run its own process and environment.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.scenario.bundled import resolve_scenario_path
from harness.scenario.load import load_scenarios

ROOT = Path(__file__).resolve().parent.parent
HAVE_BOTH = all(importlib.util.find_spec(m) is not None for m in ("torch", "tensorflow"))
needs_both = pytest.mark.skipif(not HAVE_BOTH, reason="needs torch and tensorflow")


def tf_version() -> tuple[int, int]:
    from backends.tensorflow import TensorFlowBackend

    major, minor = (TensorFlowBackend().framework_version() or "0.0").split(".")[:2]
    return int(major), int(minor)


def run(tmp_path, text: str, *args: str) -> list[dict]:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    db = tmp_path / "h.db"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--store", str(db), "-q", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr
    out = subprocess.run([sys.executable, "-m", "harness", "results", "--store", str(db), "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_bundled_comparison_pairs_every_mode_and_both_keras_without_flags():
    (resnet, gemm) = load_scenarios(resolve_scenario_path("frameworks"), [])
    from harness.session.plan import build_plan

    plan = [s for s in build_plan(resnet, "s") if s.replicate == 0]  # one process of each configuration
    tf_runs = [s for s in plan if s.backend == "tensorflow"]
    torch_runs = [s for s in plan if s.backend == "torch"]
    # torch runs each configuration once; TensorFlow once per Keras; ResNet-50 in amp_bf16 alone by default (the
    # file's header: tf32 and amp_fp16 are a --set away), every execution mode
    assert len(torch_runs) == 4 and len(tf_runs) == 4 * 2
    assert {s.params["precision"] for s in plan} == {"amp_bf16"}
    assert {s.options["keras"] for s in tf_runs} == {"keras3", "tf_keras"}
    assert len({s.run_key for s in tf_runs}) == len(tf_runs)  # the Keras choice is part of the configuration
    assert {s.params["execution"] for s in plan} == {"eager", "graph", "cuda_graph", "compiled"}
    assert {(s.params["batch_size"], s.params["image_size"]) for s in plan} == {(256, 224)}
    assert {s.params["precision"] for s in build_plan(gemm, "s")} == {"fp32", "tf32", "bf16", "fp16"}


def test_the_resnet50_precisions_beyond_the_default_are_the_command_the_file_and_readme_give():
    # the command the file's header and the README give for tf32 and amp_fp16 must plan them, every mode
    header = Path(resolve_scenario_path("frameworks")).read_text()
    readme = (ROOT / "README.md").read_text()
    flag = "--document frameworks-resnet50 --set 'precision=[tf32, amp_fp16]'"
    assert flag in header and flag in readme.replace("\n", " ")
    from harness.session.plan import build_plan

    (resnet,) = load_scenarios(resolve_scenario_path("frameworks"), ["precision=[tf32, amp_fp16]"],
                               documents=("frameworks-resnet50",))
    plan = [s for s in build_plan(resnet, "s") if s.replicate == 0]
    assert {(s.params["precision"], s.params["execution"]) for s in plan} == {
        (p, e) for p in ("tf32", "amp_fp16") for e in ("eager", "graph", "cuda_graph", "compiled")}
    assert len(plan) == 2 * 4 * 3  # torch and TensorFlow with each Keras


@pytest.mark.parametrize("text, field", [
    ("options: {tensorflow: {keras: keras4}}", "options.tensorflow"),
    ("options: {tensorflow: {kras: keras3}}", "options.tensorflow"),
    ("options: {torch: {keras: keras3}}", "options.torch"),
    ("sweep: {tensorflow.keras: [keras3, keras9]}", "sweep.tensorflow.keras"),
    ("sweep: {tensorflw.keras: [keras3]}", "sweep.tensorflw.keras"),
])
def test_an_unknown_option_or_value_is_bad_input_naming_it(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: x\nworkload: gemm\nparams: {{size: 8}}\n{text}\n")
    proc = subprocess.run([sys.executable, "-m", "harness", "validate", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"field `{field}`" in proc.stderr and "Traceback" not in proc.stderr


@needs_both
def test_keras_3_and_tf_keras_build_the_same_model_from_the_same_inputs(tmp_path):
    records = run(tmp_path, """
name: keras-choice
workload: resnet50_train
params: {batch_size: 2, image_size: 32, num_classes: 10, memory_format: channels_last, execution: graph}
measure: {warmup: 0, steps: 1, repeats: 1, processes: 1}
backends: [tensorflow]
sweep:
  tensorflow.keras: [keras3, tf_keras]
""")
    by_keras = {r["options"]["keras"]: r for r in records}
    assert set(by_keras) == {"keras3", "tf_keras"}
    tf_keras = by_keras["tf_keras"]
    assert tf_keras["status"] == "ok", tf_keras["error"]
    assert "Keras 2" in tf_keras["api"]["keras"]
    keras3 = by_keras["keras3"]
    if tf_version() < (2, 16):  # TF 2.12 bundles Keras 2 only
        assert keras3["status"] == "unsupported" and "Keras 3 needs TensorFlow 2.16+" in keras3["error"]
        return
    assert keras3["status"] == "ok", keras3["error"]
    assert keras3["api"]["keras"].startswith("keras 3")
    assert tf_keras["api"]["keras"].startswith("tf_keras 2")
    assert keras3["checks"]["model_parameters"] == tf_keras["checks"]["model_parameters"] == 23_528_522
    assert keras3["checks"]["inputs_fingerprint"] == tf_keras["checks"]["inputs_fingerprint"]
    assert keras3["run_key"] != tf_keras["run_key"]


@needs_both
def test_both_frameworks_use_the_threads_the_scenario_sets_and_the_same_operands(tmp_path):
    records = run(tmp_path, """
name: threads
workload: gemm
params: {size: 64, precision: bf16}
measure: {warmup: 0, steps: 2, repeats: 2, processes: 1}
backends: [torch, tensorflow]
cpu_threads: {intra_op: 1, inter_op: 2}
""")
    assert [r["status"] for r in records] == ["ok", "ok"], [r["error"] for r in records]
    for record in records:
        assert record["env"]["framework"]["threads"] == {"intra_op": 1, "inter_op": 2}, record["backend"]
    torch_record, tf_record = sorted(records, key=lambda r: r["backend"] != "torch")
    # the operands as they reached each framework's device, after the cast to bfloat16
    assert torch_record["checks"]["inputs_fingerprint"] == tf_record["checks"]["inputs_fingerprint"]
    assert "output allocated" in torch_record["api"]["operation"] and "output allocated" in tf_record["api"]["operation"]
