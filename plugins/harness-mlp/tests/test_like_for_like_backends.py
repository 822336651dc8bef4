"""Like for like across the backends, on the example workload (the trainers' pipelines and loss scaling are the same
for every training workload; mlp_train trains in seconds where ResNet-50 takes minutes on 2 cores).

Each input pipeline is recorded in the same structured fields (api.input_pipeline) and held equal across torch,
TensorFlow (its own loop and Keras's fit) and JAX: docs/execution.md calls the host-fed rows like with like, so a
side that prefetches less deep, or pins where another does not, fails here. `loss_scale: static` is the same
constant on every side, with no inf check.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

PLUGIN = Path(__file__).resolve().parent.parent
ROOT = PLUGIN.parent.parent
DEVELOPMENT_WORKLOADS = "mlp_train=harness_mlp:MLP_TRAIN"
for path in (str(ROOT), str(ROOT / "plugins" / "harness-jax"), str(PLUGIN)):
    if path not in sys.path:
        sys.path.insert(0, path)

from tests.specs import backend_spec, run_backend  # noqa: E402

TINY = {"batch_size": 8, "features": 12, "hidden": 16, "layers": 2, "num_classes": 5}
MEASURE = {"warmup": 0, "steps": 2, "repeats": 1}
KEYS = {"source", "prefetch_depth", "pinned", "copy_stream", "copy_per_step"}


@pytest.fixture(autouse=True)
def development_workloads(monkeypatch):
    """mlp_train in the registry for this file's tests only."""
    monkeypatch.setenv("HARNESS_WORKLOADS", os.environ.get("HARNESS_WORKLOADS") or DEVELOPMENT_WORKLOADS)


def backends() -> dict:
    """(backend, name, params, options) of each side installed here: torch, TensorFlow's loop and fit, JAX."""
    runs = {}
    if importlib.util.find_spec("torch") is not None:
        from backends.torch import TorchBackend

        runs["torch"] = (TorchBackend(), "torch", {"execution": "eager"}, {})
    if importlib.util.find_spec("tensorflow") is not None:
        from backends.tensorflow import TensorFlowBackend

        runs["tensorflow"] = (TensorFlowBackend(), "tensorflow", {"execution": "graph"}, {})
        runs["tensorflow fit"] = (TensorFlowBackend(), "tensorflow", {"execution": "default"}, {"fit_steps": 4})
    if importlib.util.find_spec("flax") is not None:
        from harness_jax import JaxBackend

        runs["jax"] = (JaxBackend(), "jax", {"execution": "compiled"}, {})
    return runs


def pipelines(inputs: str) -> dict[str, dict]:
    """Each side's api.input_pipeline of a tiny mlp_train run with `inputs`."""
    found = {}
    for label, (backend, name, params, options) in backends().items():
        spec = backend_spec(name, "mlp_train", {**TINY, **params, "inputs": inputs}, MEASURE, options=options)
        record = run_backend(backend, spec)
        assert record["status"] == "ok", (label, record.get("error"))
        found[label] = record["api"]["input_pipeline"]
    if len(found) < 2:
        pytest.skip(f"one framework installed ({', '.join(found)}): nothing to compare")
    return found


def test_host_fed_pipelines_prefetch_equally_deep_from_equally_pinned_memory_on_every_backend():
    found = pipelines("host")
    for label, fields in found.items():
        assert set(fields) == KEYS and fields["source"] == "host" and fields["copy_per_step"], (label, fields)
    assert len({(fields["prefetch_depth"], fields["pinned"]) for fields in found.values()}) == 1, found
    assert {fields["prefetch_depth"] for fields in found.values()} == {1}, found


def test_device_batches_stay_resident_except_under_keras_fit_which_copies_one_every_step():
    found = pipelines("device")
    for label, fields in found.items():
        assert set(fields) == KEYS and fields["source"] == "device" and fields["prefetch_depth"] == 0, (label, fields)
        assert fields["copy_per_step"] == (label == "tensorflow fit"), (label, fields)


def test_static_loss_scaling_is_one_constant_on_every_backend_without_a_host_sync():
    from harness.errors import Unsupported
    from harness.workloads.training import STATIC_LOSS_SCALE

    scales = {}
    for label, (backend, name, params, options) in backends().items():
        spec = backend_spec(name, "mlp_train", {**TINY, **params, "precision": "amp_fp16", "loss_scale": "static"},
                            MEASURE, options=options)
        try:
            record = run_backend(backend, spec)
        except Unsupported:
            if name == "torch":  # torch < 2.3: no float16 autocast on the CPU
                continue
            raise
        if record["status"] == "unsupported" and name == "torch":  # torch < 2.3: no float16 training on the CPU
            continue
        assert record["status"] == "ok", (label, record.get("error"))
        assert "GradScaler" not in record["api"]["precision"] and "skips non-finite" not in str(record["api"]), label
        scales[label] = record["timing"]["loss_scale"]
    if len(scales) < 2:
        pytest.skip(f"one framework ran ({', '.join(scales)}): nothing to compare")
    assert set(scales.values()) == {STATIC_LOSS_SCALE}, scales
