"""`inputs: host` of resnet50_train: batches kept in host memory and fed through each framework's own pipeline.

On the CPU with tiny sizes (32 px, batch 2, 10 classes, 3 steps a block): each backend's record names its
pipeline, counts the bytes one step copies, and fingerprints the batches that reached the step, which must
be the host dataset drawn from the seed; `inputs: device` keeps the run keys stored before the field.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.seam.runspec import run_key
from harness.workloads.base import fingerprint
from harness.workloads.host_inputs import (
    HOST_BATCHES,
    dataset_fingerprint,
    host_batches,
)
from harness.workloads.resnet50_train import ResNet50Params, synthetic_batch
from tests.specs import backend_spec, run_backend

TINY = {"batch_size": 2, "image_size": 32, "num_classes": 10, "inputs": "host"}
MEASURE = {"warmup": 0, "steps": 3, "repeats": 2}
#: one batch of TINY: 2 x 3 x 32 x 32 float32 images and 2 int64 labels
BATCH_BYTES = 2 * 3 * 32 * 32 * 4 + 2 * 8


def expected_fingerprint(seed: int = 0) -> str:
    """The fingerprint of the host dataset drawn straight from the seed, in the neutral layout."""
    batches = iter(host_batches(synthetic_batch, ResNet50Params(**TINY), seed))
    return dataset_fingerprint(lambda: next(batches), channels_last=False)


def test_inputs_device_leaves_the_run_key_unchanged_and_host_gets_its_own():
    params = ResNet50Params(batch_size=2).model_dump()
    assert params["inputs"] == "device"
    before = {k: v for k, v in params.items() if k != "inputs"}  # a record made before the field existed
    assert run_key("s", "resnet50_train", "torch", "cpu", params) == run_key("s", "resnet50_train", "torch", "cpu", before)
    host = {**params, "inputs": "host"}
    assert run_key("s", "resnet50_train", "torch", "cpu", host) != run_key("s", "resnet50_train", "torch", "cpu", params)


def test_the_host_dataset_holds_distinct_batches_from_the_seed_and_its_first_is_the_device_batch():
    p = ResNet50Params(**TINY)
    batches = host_batches(synthetic_batch, p, 0)
    assert len(batches) == HOST_BATCHES
    device_images, device_labels = synthetic_batch(p, 0)
    assert np.array_equal(batches[0][0], device_images) and np.array_equal(batches[0][1], device_labels)
    assert len({fingerprint(x) for x, _ in batches}) == HOST_BATCHES
    again = host_batches(synthetic_batch, p, 0, channels_last=True)
    assert np.array_equal(again[3][0], batches[3][0].transpose(0, 2, 3, 1))
    assert expected_fingerprint(1) != expected_fingerprint(0)


@pytest.mark.parametrize("change", [{"grad_accum": 2}, {"replicas": 2}])
def test_host_inputs_the_step_cannot_take_are_refused_before_a_worker_starts(change):
    from backends.tensorflow import TensorFlowBackend
    from backends.torch import TorchBackend

    params = ResNet50Params(**{**TINY, **change}).model_dump()
    for backend in (TorchBackend(), TensorFlowBackend()):
        reason = backend.unsupported_reason("resnet50_train", params, "cpu", {})
        assert reason and reason.startswith("inputs: host with " + next(iter(change))), reason
        assert backend.unsupported_reason("resnet50_train", {**params, "inputs": "device"}, "cpu", {}) is None


def _check_record(record: dict, copied: int = BATCH_BYTES) -> None:
    assert record["status"] == "ok", record.get("error")
    assert record["checks"]["inputs_fingerprint"] == expected_fingerprint()
    assert record["timing"]["host_to_device_bytes_per_step"] == copied
    assert record["api"]["inputs"].startswith(f"host: {HOST_BATCHES} distinct synthetic batches")
    assert all(np.isfinite(s) and s > 0 for s in record["samples"]) and len(record["samples"]) == 2


@pytest.mark.parametrize("params", [{}, {"memory_format": "channels_last"}])
def test_torch_feeds_host_batches_through_a_dataloader(params):
    pytest.importorskip("torchvision")
    from backends.torch import TorchBackend

    record = run_backend(TorchBackend(), backend_spec("torch", "resnet50_train", {**TINY, **params}, MEASURE))
    _check_record(record)
    assert "torch.utils.data.DataLoader(batch_size=None" in record["api"]["inputs"]
    # warm-up 0 asked, two passes of the host dataset run before timing (the first step and 7 more)
    assert record["timing"]["warmup_raised_to"] == 2 * HOST_BATCHES - 1
    device = run_backend(TorchBackend(), backend_spec("torch", "resnet50_train", {**TINY, **params, "inputs": "device"},
                                                      MEASURE))
    # inputs: device reuses batch 0 of the host dataset, and copies nothing per step
    assert device["checks"]["inputs_fingerprint"] == fingerprint(*synthetic_batch(ResNet50Params(**TINY), 0))
    assert "host_to_device_bytes_per_step" not in device["timing"] and device["api"]["inputs"].startswith("device:")
    assert "warmup_raised_to" not in device["timing"]


@pytest.mark.parametrize("execution", ["eager", "graph", "default"])
def test_tensorflow_feeds_host_batches_through_tf_data(execution):
    pytest.importorskip("tensorflow")
    from backends.tensorflow import TensorFlowBackend

    # channels_last: TensorFlow without oneDNN has no NCHW convolution on the CPU
    params = {**TINY, "memory_format": "channels_last", "execution": execution}
    # default: Keras's fit reads the same pipeline, 4 steps a call (one pass over the host dataset per call)
    options = {"fit_steps": 4} if execution == "default" else {}
    record = run_backend(TensorFlowBackend(), backend_spec("tensorflow", "resnet50_train", params, MEASURE,
                                                           options=options))
    _check_record(record)
    assert "tf.data.Dataset.from_tensor_slices" in record["api"]["inputs"]
    if execution == "graph":  # each step's batch is an argument of the same shape: one trace
        assert record["timing"]["traces"] == 1
    if execution == "default":
        assert record["timing"]["steps_per_call"] == 4 and "model.fit" in record["api"]["execution"]
        assert record["timing"]["warmup_raised_to"] == 1  # two calls of 4 steps: the first and one more


def test_a_session_refuses_an_unsupported_host_combination_and_bad_values_exit_2(tmp_path, write_scenario, harness_cli):
    from harness.results.store import open_store

    scenario = {"name": "host", "workload": "resnet50_train",
                "params": {**TINY, "grad_accum": 2}, "measure": {"warmup": 0, "steps": 1, "repeats": 1},
                "backends": ["torch"], "devices": ["cpu"]}
    code, out, err = harness_cli("run", write_scenario(scenario), "--store", "h.db")
    assert code == 3, err  # nothing measured: every run was unsupported
    with open_store(tmp_path / "h.db") as store:
        records = store.records()
    assert records and all(r["status"] == "unsupported" and "inputs: host with grad_accum" in r["error"]
                           for r in records)
    bad = write_scenario({**scenario, "params": {**TINY, "inputs": "disk"}}, name="bad.yaml")
    code, out, err = harness_cli("run", bad, "--store", "bad.db")
    assert code == 2 and "params.inputs" in err + out and "Traceback" not in err + out
    assert not (tmp_path / "bad.db").exists()
