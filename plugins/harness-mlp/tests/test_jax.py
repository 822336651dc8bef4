"""mlp_train through the JAX backend on the CPU: the example workload, brought from outside harness, trained by the
JAX trainer with its Flax part (harness_mlp.flax_part), in-process and through `harness run` (processes,
precisions, the profile breakdown, a capacity search). Tiny sizes: a few thousand parameters, a few steps."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import yaml

PLUGIN = Path(__file__).resolve().parent.parent
ROOT = PLUGIN.parent.parent
JAX_PLUGIN = ROOT / "plugins" / "harness-jax"
#: the workload found without installing this plugin (the development route), here and in harness's workers
DEVELOPMENT_WORKLOADS = "mlp_train=harness_mlp:MLP_TRAIN"
# the repository, the JAX plugin and this plugin's source, neither plugin installed
for path in (str(ROOT), str(JAX_PLUGIN), str(PLUGIN)):
    if path not in sys.path:
        sys.path.insert(0, path)

pytest.importorskip("flax")

from harness.results.store import open_store  # noqa: E402
from harness.seam.backend import RunContext  # noqa: E402
from harness.workloads.base import fingerprint  # noqa: E402
from harness.workloads.host_inputs import dataset_fingerprint, host_batches  # noqa: E402
from harness_jax import EAGER_TRAINING, JaxBackend  # noqa: E402
from harness_mlp import MLPParams, parameter_count, synthetic_batch  # noqa: E402
from tests.specs import backend_spec, run_backend  # noqa: E402

@pytest.fixture(autouse=True)
def development_workloads(monkeypatch):
    """mlp_train in the registry for this file's tests only (other test files see the workloads they expect)."""
    monkeypatch.setenv("HARNESS_WORKLOADS", os.environ.get("HARNESS_WORKLOADS") or DEVELOPMENT_WORKLOADS)


TINY = {"batch_size": 8, "features": 16, "hidden": 32, "layers": 2, "num_classes": 4}
TWO_BLOCKS = {"warmup": 0, "steps": 2, "repeats": 2}


def train(ctx: RunContext | None = None, **params) -> dict:
    spec = backend_spec("jax", "mlp_train", {**TINY, **params}, TWO_BLOCKS)
    return run_backend(JaxBackend(), spec, ctx)


def test_the_jax_backend_runs_mlp_train_from_its_part_with_every_technique_declared():
    backend = JaxBackend()
    assert backend.part_target("mlp_train") == "harness_mlp.flax_part:PART"
    assert "mlp_train" in backend.workload_names()
    assert backend.techniques("mlp_train")["execution"] == ("eager", "graph", "cuda_graph", "compiled", "default")
    assert backend.unsupported_reason("mlp_train", {**TINY, "execution": "default"}, "cpu") is None
    assert "JAX has no `graph` mode" in backend.unsupported_reason("mlp_train", {"execution": "graph"}, "cpu")


def test_compiled_adamw_training_has_the_workloads_count_inputs_and_decay_on_matrices_only():
    result = train(execution="compiled")
    assert result["status"] == "ok", result.get("error")
    checks = result["checks"]
    assert checks["model_parameters"] == parameter_count(MLPParams(**TINY)) == 16 * 32 + 32 + 32 * 32 + 32 + 32 * 4 + 4
    assert checks["inputs_fingerprint"] == fingerprint(*synthetic_batch(MLPParams(**TINY), 0))
    assert math.isfinite(checks["loss_first"]) and checks["loss_last"] < checks["loss_first"]
    api = result["api"]
    assert api["optimizer"] == ("optax.adamw(learning_rate=0.001, b1=0.9, b2=0.999, eps=1e-08, weight_decay=0.01, "
                                "mask=weights of 2+ dimensions) (torch.optim.AdamW's update)")
    assert api["model"].startswith("An MLP classifier in flax.linen") and "memory_format" not in api
    assert api["data"].startswith("features float32 and labels int32")
    assert result["timing"]["items_per_step"] == 8 and result["timing"]["compilations"] == 1


def test_recompute_grad_accum_and_eager_train_the_same_network():
    ctx = RunContext()
    plain = train(execution="compiled")
    other = train(ctx, execution="eager", recompute="blocks", grad_accum=2)
    assert other["status"] == "ok", other.get("error")
    # the same weights on the same batch: the first loss does not depend on how the step runs
    assert other["checks"]["loss_first"] == pytest.approx(plain["checks"]["loss_first"], rel=1e-5)
    assert other["api"]["recompute"] == "flax.linen.remat (jax.checkpoint) around each of the 2 Hidden blocks"
    assert other["api"]["grad_accum"].startswith("2 micro-batches of 8") and other["timing"]["items_per_step"] == 16
    assert EAGER_TRAINING in ctx.warnings


def test_host_inputs_feed_the_workloads_own_batches():
    result = train(execution="compiled", inputs="host")
    assert result["status"] == "ok", result.get("error")
    batches = iter(host_batches(synthetic_batch, MLPParams(**TINY), 0))
    assert result["checks"]["inputs_fingerprint"] == dataset_fingerprint(lambda: next(batches), channels_last=False)
    assert result["timing"]["host_to_device_bytes_per_step"] == 8 * 16 * 4 + 8 * 4


def harness(tmp_path: Path, scenario: dict, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "mlp.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(JAX_PLUGIN), str(PLUGIN)])}
    if not any(ep.name == "jax" for ep in entry_points(group="harness.backends")):
        env["HARNESS_BACKENDS"] = "jax=harness_jax:JaxBackend"
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--store", "s.db", *args],
                          capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_harness_run_trains_mlp_on_jax_in_two_processes_per_precision_with_a_profile(tmp_path):
    scenario = {"name": "mlp-jax", "workload": "mlp_train", "params": {**TINY, "execution": "compiled"},
                "measure": {"warmup": 1, "steps": 2, "repeats": 2, "processes": 2, "profile": True},
                "backends": ["jax"], "devices": ["cpu"], "sweep": {"precision": ["fp32", "amp_bf16"]}}
    code, out, err = harness(tmp_path, scenario)
    assert code == 0, (out[-3000:], err[-3000:])
    with open_store(tmp_path / "s.db") as store:
        records = store.records()
    assert sorted(r["params"]["precision"] for r in records) == ["amp_bf16", "amp_bf16", "fp32", "fp32"]
    for record in records:
        assert record["status"] == "ok", record.get("error")
        assert record["checks"]["model_parameters"] == parameter_count(MLPParams(**TINY))
        assert record["unit"] == "samples/s" and record["median"] > 0
        profile = record["profile"]
        assert "error" not in profile, profile.get("error")
        assert profile["source"].startswith("jax.profiler") and profile["activity"] == "cpu"
        # XLA's CPU ops of the profiled steps, classed: the classes and idle make up the profiled step
        assert profile["busy_s"] > 0 and profile["top"]
        assert sum(profile["classes_s"].values()) + profile["idle_s"] == pytest.approx(profile["step_s"], rel=1e-6)
    # the two processes of one configuration start from the same weights and batch
    for precision in ("fp32", "amp_bf16"):
        firsts = {r["checks"]["loss_first"] for r in records if r["params"]["precision"] == precision}
        assert len(firsts) == 1, firsts
    bf16 = next(r for r in records if r["params"]["precision"] == "amp_bf16")
    assert bf16["api"]["precision"].startswith("Flax modules with dtype=bfloat16, param_dtype=float32")


def test_a_capacity_search_finds_mlp_trains_up_to_its_limit(tmp_path):
    scenario = {"name": "mlp-capacity", "workload": "mlp_train", "params": {**TINY, "execution": "compiled"},
                "measure": {"warmup": 0, "steps": 1, "repeats": 1, "processes": 1},
                "backends": ["jax"], "devices": ["cpu"], "capacity": {"start": 4, "limit": 8}}
    code, out, err = harness(tmp_path, scenario)
    assert code == 0, (out[-3000:], err[-3000:])
    with open_store(tmp_path / "s.db") as store:
        rows = store.records()
    capacity = next(r for r in rows if r["metric"] == "max_batch_size")
    probes = {r["params"]["batch_size"]: r["status"] for r in rows if r.get("probe_of")}
    assert capacity["status"] == "ok" and capacity["median"] == 8, capacity.get("error")
    assert probes == {4: "ok", 8: "ok"}
