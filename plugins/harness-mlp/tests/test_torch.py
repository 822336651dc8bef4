"""mlp_train through the torch backend on the CPU: the torch part (harness_mlp.torch_part) trained by the backend's
trainer in this process, then `harness run` as a user runs it (processes, precisions, a profile, a capacity
search), each run its own worker. Tiny sizes (a few features, a few steps) and one torch thread: 2 CPU cores."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from conftest import ROOT  # noqa: E402
from harness_mlp import MLPParams, parameter_count, synthetic_batch, torch_part  # noqa: E402

from backends.torch import TorchBackend  # noqa: E402
from backends.torch.optimizer import build_optimizer  # noqa: E402
from backends.torch.precision import Amp  # noqa: E402
from harness.results.store import open_store  # noqa: E402
from harness.workloads.training import BuildContext, OptimizerSpec  # noqa: E402
from tests.specs import backend_spec, run_backend  # noqa: E402

TINY = {"batch_size": 8, "features": 12, "hidden": 16, "layers": 2, "num_classes": 5}
TWO_STEPS = {"warmup": 0, "steps": 1, "repeats": 1}  # the first step and one timed step
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train(measure: dict | None = None, device: str = "cpu", **params) -> dict:
    """One run of mlp_train through the torch backend in this process, as a worker runs it."""
    return run_backend(TorchBackend(), backend_spec("torch", "mlp_train", {**TINY, **params}, measure or TWO_STEPS,
                                                    device=device))


def built(seed: int = 0) -> tuple[torch.nn.Module, BuildContext]:
    """The torch part's model as the trainer builds it: torch seeded first, the blocks counted."""
    torch.manual_seed(seed)
    ctx = BuildContext(seed=seed, framework=torch)
    return torch_part.PART.build(MLPParams(**TINY), ctx), ctx


# --- the part, trained in this process ----------------------------------------------------------------------------


def test_the_torch_part_is_linear_relu_blocks_and_a_classifier_with_the_workloads_count():
    model, ctx = built()
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert ctx.blocks == TINY["layers"] and len(linears) == TINY["layers"] + 1
    assert [(m.in_features, m.out_features) for m in linears] == [(12, 16), (16, 16), (16, 5)]
    assert all(m.bias is not None for m in linears)
    assert sum(isinstance(m, torch.nn.ReLU) for m in model.modules()) == TINY["layers"]
    assert isinstance(model[-1], torch.nn.Linear)  # logits: no activation after the classifier
    assert sum(t.numel() for t in model.parameters()) == parameter_count(MLPParams(**TINY)) == 565


def test_the_first_loss_is_the_seeded_models_cross_entropy_on_the_workloads_batch():
    result = train()
    assert result.get("status", "ok") == "ok", result.get("error")
    model, _ = built()
    features, labels = synthetic_batch(MLPParams(**TINY), 0)
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(torch.from_numpy(features)), torch.from_numpy(labels))
    checks = result["checks"]
    assert checks["loss_first"] == pytest.approx(float(expected), rel=1e-6)
    assert checks["model_parameters"] == parameter_count(MLPParams(**TINY))
    assert checks["loss_last"] < checks["loss_first"]  # AdamW stepped, on the one resident batch
    assert "memory_format" not in result["api"]  # not an image workload
    assert result["timing"]["items_per_step"] == TINY["batch_size"] and "images_per_step" not in result["timing"]


def test_adamw_decays_the_matrices_only_and_the_record_names_the_implementation():
    model, _ = built()
    p = MLPParams(**TINY)
    api: dict = {}
    spec = OptimizerSpec("adamw", lr=1e-3, weight_decay=0.01, decay="matrices")
    optimizer = build_optimizer(spec, model, p, torch.device("cpu"), Amp(), api)
    assert isinstance(optimizer, torch.optim.AdamW)
    decayed, kept = optimizer.param_groups
    assert decayed["weight_decay"] == 0.01 and all(t.dim() == 2 for t in decayed["params"])
    assert kept["weight_decay"] == 0.0 and all(t.dim() == 1 for t in kept["params"])
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))
    assert api["optimizer"].startswith("torch.optim.AdamW(lr=0.001, betas=(0.9, 0.999), eps=1e-08, foreach=False)")
    assert "on the 3 weights of 2+ dims, 0 on the other 3 parameters" in api["optimizer"]
    everything = build_optimizer(OptimizerSpec("adamw", lr=1e-3, weight_decay=0.01), model, p, torch.device("cpu"),
                                 Amp(), {})
    assert [group["weight_decay"] for group in everything.param_groups] == [0.01]


def test_recompute_checkpoints_each_hidden_layer_and_trains_alike(monkeypatch):
    import torch.utils.checkpoint as ckpt

    calls = []
    real = ckpt.checkpoint
    monkeypatch.setattr(ckpt, "checkpoint", lambda *a, **k: calls.append(k["preserve_rng_state"]) or real(*a, **k))
    plain = train()
    assert calls == []
    recomputed = train(recompute="blocks")
    assert recomputed["api"]["recompute"] == ("torch.utils.checkpoint.checkpoint(use_reentrant=False) per Sequential "
                                              "(2 blocks)")
    assert calls == [False] * (TINY["layers"] * 2)  # each block in both steps; no dropout: no RNG state saved
    # the same weights from the seed and the same batch: recomputing changes no number
    for key in ("loss_first", "loss_last", "parameters_sum"):
        assert recomputed["checks"][key] == plain["checks"][key], key


def test_a_part_with_its_own_loss_is_trained_on_it(monkeypatch):
    class DoubledLoss(torch_part.TorchMLP):
        def loss(self, outputs, labels):
            return 2.0 * torch.nn.functional.cross_entropy(outputs, labels)

    base = train()
    monkeypatch.setattr(torch_part, "PART", DoubledLoss())
    doubled = train()
    assert doubled["checks"]["loss_first"] == pytest.approx(2 * base["checks"]["loss_first"], rel=1e-6)


def test_recompute_of_a_part_without_blocks_is_unsupported_with_the_reason(monkeypatch):
    from harness.errors import Unsupported

    class NoBlocks:
        def build(self, p, ctx):
            return ctx.framework.nn.Linear(p.features, p.num_classes)

    monkeypatch.setattr(torch_part, "PART", NoBlocks())
    result = train()
    # the record counts the model built, which the verdict holds to the workload's count
    assert result["checks"]["model_parameters"] == 12 * 5 + 5 and result["status"] == "failed"
    assert "wrong model: 65 trainable parameters, expected 565" in result["error"]
    with pytest.raises(Unsupported, match="passes no block through BuildContext.block"):
        train(recompute="blocks")


def test_the_whole_step_compiles_with_adamw():
    from harness.errors import Unsupported

    try:
        compiled = train(execution="compiled", measure={"warmup": 1, "steps": 1, "repeats": 1})
    except Unsupported as exc:  # torch 2.0 on Python 3.11: no torch.compile
        pytest.skip(str(exc))
    assert compiled.get("status", "ok") == "ok", compiled.get("error")
    assert compiled["api"]["execution"].startswith("torch.compile(mode=default) of the whole step")
    assert "momentum buffers" not in compiled["api"]["optimizer"]  # AdamW's state: no SGD buffers to make ready
    eager = train(measure={"warmup": 1, "steps": 1, "repeats": 1})
    assert compiled["checks"]["loss_first"] == pytest.approx(eager["checks"]["loss_first"], rel=1e-5)
    assert math.isfinite(compiled["checks"]["loss_last"]) and compiled["checks"]["loss_last"] < eager["checks"]["loss_first"]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("execution", ["eager", "cuda_graph"])
def test_on_cuda_adamw_runs_foreach_and_is_captured_in_a_whole_step_graph(execution):
    result = train(execution=execution, precision="amp_bf16", device="cuda:0",
                   measure={"warmup": 1, "steps": 2, "repeats": 2})
    assert result["status"] == "ok", result.get("error")
    assert "foreach=True" in result["api"]["optimizer"]
    assert ("capturable=True" in result["api"]["optimizer"]) == (execution == "cuda_graph")
    assert result["checks"]["loss_last"] < result["checks"]["loss_first"]


# --- harness run, as a user runs it --------------------------------------------------------------------------------


def harness(tmp_path: Path, scenario: dict, *args: str) -> list[dict]:
    """`harness run` of one torch scenario of mlp_train in a subprocess (its workers find harness and the plugin
    through conftest's environment); the records it stored."""
    path = tmp_path / "mlp.yaml"
    path.write_text(yaml.safe_dump({"name": "mlp-torch", "workload": "mlp_train", "backends": ["torch"],
                                    "devices": ["cpu"], "cpu_threads": {"intra_op": 1}, **scenario}, sort_keys=False),
                    encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "harness", "run", str(path), "--store", "s.db", "-q", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    with open_store(tmp_path / "s.db") as store:
        return list(store.records())


def test_a_session_trains_mlp_in_two_processes_at_two_precisions(tmp_path):
    found = harness(tmp_path, {"params": TINY, "measure": {"warmup": 1, "steps": 2, "repeats": 1, "processes": 2},
                               "sweep": {"precision": ["fp32", "amp_bf16"]}})
    assert sorted(r["params"]["precision"] for r in found) == ["amp_bf16", "amp_bf16", "fp32", "fp32"]
    for record in found:
        assert record["status"] == "ok", record.get("error")
        assert record["workload"] == "mlp_train" and record["unit"] == "samples/s" and record["median"] > 0
        assert record["checks"]["model_parameters"] == parameter_count(MLPParams(**TINY))
    assert len({r["checks"]["inputs_fingerprint"] for r in found}) == 1  # the same batch in every process
    assert {r["api"]["precision"].split(";")[0] for r in found} >= {"torch.autocast(cpu, bfloat16)"}
    # one process's losses are another's at the same precision: the seed decides the model and the batch
    by_precision = {r["params"]["precision"]: r["checks"]["loss_first"] for r in found}
    assert all(r["checks"]["loss_first"] == by_precision[r["params"]["precision"]] for r in found)


def test_a_profiled_run_gives_the_profile_breakdown(tmp_path):
    (record,) = harness(tmp_path, {"params": TINY,
                                   "measure": {"warmup": 1, "steps": 2, "repeats": 1, "processes": 1, "profile": True}})
    assert record["status"] == "ok", record.get("error")
    profile = record["profile"]
    assert "error" not in profile and profile["source"].startswith("torch.profiler"), profile
    # a Linear layer's forward and backward are matrix products (aten::addmm, aten::mm among torch's ops)
    assert profile["classes_s"]["matmul"] > 0 and profile["steps"] >= 1, profile


def test_a_capacity_search_finds_the_largest_batch_under_its_limit(tmp_path):
    found = harness(tmp_path, {"params": TINY, "measure": {"warmup": 0, "steps": 1, "repeats": 1, "processes": 1},
                               "capacity": {"start": 4, "limit": 16, "resolution": 4}}, "--find-max-batch")
    (answer,) = [r for r in found if r["metric"] == "max_batch_size"]
    assert answer["status"] == "ok", answer.get("error")
    assert answer["median"] == 16  # every probe fits on the CPU: the search stops at its limit
    assert all(r["status"] == "ok" for r in found if r is not answer)


def test_harness_list_shows_torch_running_mlp_train():
    # wide enough that `harness list` keeps each entry on one line, whatever terminal the tests run under
    proc = subprocess.run([sys.executable, "-m", "harness", "list"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    torch_line = next(line for line in proc.stdout.splitlines() if line.strip().startswith("torch "))
    assert "mlp_train" in torch_line.split("workloads:")[1].replace(",", " ").split()
    assert TorchBackend().techniques("mlp_train")["execution"] == ("eager", "graph", "cuda_graph", "compiled",
                                                                   "default")
