"""resnet50_train's `inputs: host` on TensorFlow: a tf.data pipeline over the host batches, prefetched to the device.

What a TensorFlow user's loop does with an in-memory dataset: tf.data.Dataset.from_tensor_slices over
the host tensors (one element a whole batch: the dataset is already batched), .repeat(), and on a GPU
tf.data.experimental.prefetch_to_device, so the next batch's copy overlaps the step; on the CPU the
batch is already in the memory the step reads, and the pipeline simply prefetches. The step takes each
batch as the argument of its tf.function (the same shapes every step: it traces once).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from harness.seam.adapter import RunInputs
from harness.workloads.host_inputs import (
    HostFeed,
    batch_bytes,
    dataset_fingerprint,
    host_batches,
    pipeline_api,
)
from harness.workloads.resnet50_train import synthetic_batch

#: Batches tf.data keeps ready ahead of the step (on the device, on a GPU): one, the next step's.
PREFETCHED_BATCHES = 1


def host_pipeline(params, placement, run: RunInputs) -> HostFeed:
    """tf.data over the host dataset in the model's layout (NHWC transposed on the host under channels_last, as
    `inputs: device` does), repeated, prefetched to a GPU or prefetched on the CPU."""
    channels_last = params.memory_format == "channels_last"
    batches = host_batches(synthetic_batch, params, run.seed, channels_last=channels_last, probe=run.probe)
    nbytes = batch_bytes(*batches[0])
    with tf.device("/CPU:0"):  # the dataset lives in host memory, whatever the step's device
        images = tf.constant(np.stack([x for x, _ in batches]))
        labels = tf.constant(np.stack([y for _, y in batches]))
        del batches
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).repeat()
    if placement.is_gpu:
        dataset = dataset.apply(tf.data.experimental.prefetch_to_device(placement.tf_name, PREFETCHED_BATCHES))
        described = (f"tf.data.Dataset.from_tensor_slices(...).repeat()"
                     f".apply(tf.data.experimental.prefetch_to_device({placement.tf_name!r}, {PREFETCHED_BATCHES}))")
    else:
        dataset = dataset.prefetch(PREFETCHED_BATCHES)
        described = (f"tf.data.Dataset.from_tensor_slices(...).repeat().prefetch({PREFETCHED_BATCHES}) (on the CPU the "
                     "batch is already in the memory the step reads: no copy to a device)")
    fingerprint = None
    if not run.probe:
        check = iter(dataset)
        fingerprint = dataset_fingerprint(lambda: tuple(t.numpy() for t in next(check)), channels_last)
        del check
    stream = iter(dataset)
    return HostFeed(next=lambda: next(stream), fingerprint=fingerprint, api=pipeline_api(described, nbytes),
                        bytes_per_step=nbytes, dataset=dataset)
