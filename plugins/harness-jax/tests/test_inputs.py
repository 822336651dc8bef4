"""`inputs: host` on JAX: the host dataset fed by a jax.device_put issued one step ahead, on the CPU."""

from __future__ import annotations

import pytest

pytest.importorskip("flax")

from helpers import TINY_RESNET, train  # noqa: E402

from harness.workloads.host_inputs import (  # noqa: E402
    HOST_BATCHES,
    dataset_fingerprint,
    host_batches,
)
from harness.workloads.resnet50_train import ResNet50Params, synthetic_batch  # noqa: E402
from harness_jax import JaxBackend  # noqa: E402
from harness_jax.inputs import prefetched  # noqa: E402


def test_the_compiled_step_reads_the_seeds_host_dataset_one_batch_a_step():
    record = train(execution="compiled", memory_format="channels_last", inputs="host",
                   measure={"warmup": 0, "steps": 3, "repeats": 2})
    # what reaches the step is checked here, not the training: on a CPU with AVX-512 (XLA's CPU kernels there) this
    # tiny model's loss on the four host batches turns NaN within 7 steps, where it stayed finite on CPUs without
    # it; the record then says `diverged` with every figure kept. Not yet explained.
    assert record["status"] in ("ok", "diverged"), record.get("error")
    batches = iter(host_batches(synthetic_batch, ResNet50Params(**TINY_RESNET), 0))
    # the same fingerprint torch's DataLoader and TensorFlow's tf.data give (tests/test_host_inputs.py)
    assert record["checks"]["inputs_fingerprint"] == dataset_fingerprint(lambda: next(batches), channels_last=False)
    # float32 images and int32 labels: JAX keeps no 64-bit integers without x64
    assert record["timing"]["host_to_device_bytes_per_step"] == 2 * 3 * 32 * 32 * 4 + 2 * 4
    assert record["timing"]["compilations"] == 1  # every batch has the same shape: one compile
    assert "jax.device_put of the next batch" in record["api"]["inputs"]


def test_each_batch_is_put_before_the_step_ahead_of_it_takes_its_own():
    puts: list = []
    take = prefetched(lambda b: puts.append(b) or b, list(range(HOST_BATCHES)))
    assert puts == [0]  # the first batch is put before any step
    assert [take() for _ in range(HOST_BATCHES + 1)] == [0, 1, 2, 3, 0]
    assert puts == [0, 1, 2, 3, 0, 1]  # each take issued the put of the batch after it


def test_host_inputs_under_grad_accum_are_refused_before_a_worker_starts():
    params = ResNet50Params(**TINY_RESNET, inputs="host", grad_accum=2).model_dump()
    assert JaxBackend().unsupported_reason("resnet50_train", params, "cpu", {}).startswith("inputs: host with grad_accum")
