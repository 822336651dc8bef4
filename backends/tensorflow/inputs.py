"""A training step's batches on TensorFlow, drawn by the workload (Training.batch) from the scenario's seed.

`inputs: device`: one batch as tensors on the device, read back and fingerprinted; under MirroredStrategy each
replica's own batch on its own device. `inputs: host`: what a TensorFlow user's loop does with an in-memory
dataset: tf.data.Dataset.from_tensor_slices over the host batches (one element a whole batch: the dataset is
already batched), .repeat(), and on a GPU tf.data.experimental.prefetch_to_device, so the next batch's copy
overlaps the step; on the CPU the batch is already in the memory the step reads, and the pipeline simply
prefetches. The step takes each batch as the argument of its tf.function (the same shapes every step: it
traces once).

An image workload's features are NCHW; under `memory_format: channels_last` the workload draws them NHWC, and
the fingerprint reads them back in the neutral (NCHW) layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import tensorflow as tf

from harness.seam.adapter import RunInputs
from harness.workloads.base import fingerprint
from harness.workloads.host_inputs import (
    DEVICE_API,
    HostFeed,
    batch_bytes,
    dataset_fingerprint,
    host_batches,
    input_pipeline,
    pipeline_api,
)
from harness.workloads.training import Training

#: Batches tf.data keeps ready ahead of the step (on the device, on a GPU): one, the next step's.
PREFETCHED_BATCHES = 1


def channels_last(training: Training, params) -> bool:
    """Whether the workload's features are images drawn NHWC (`memory_format: channels_last`)."""
    return training.images and getattr(params, "memory_format", "channels_first") == "channels_last"


def per_step_field(training: Training) -> str:
    """The timing field of the items one training step reads (`images_per_step` for an image workload)."""
    return "images_per_step" if training.images else "items_per_step"


@dataclass
class Inputs:
    """The batch on the device, as the step takes it, and what says where it came from."""

    features: Any
    labels: Any
    #: the batch read back in the neutral layout and hashed; None for a capacity probe
    fingerprint: str | None
    #: the data-parallel strategy of this replica's device; None: a plain run
    strategy: Any
    #: TensorFlow's names of the devices this process holds replicas on (MirroredStrategy); [] otherwise
    in_process: list[str]
    #: the record's api.inputs
    api: str = DEVICE_API
    #: inputs: host, the tf.data pipeline a step reads its batch from; None: every step reads features, labels
    pipeline: HostFeed | None = None
    #: the record's api.input_pipeline (harness.workloads.host_inputs.input_pipeline)
    fields: dict | None = None

    def next(self) -> tuple[Any, Any]:
        """The (features, labels) the next step consumes."""
        return self.pipeline.next() if self.pipeline is not None else (self.features, self.labels)


def build_inputs(training: Training, params, dev, run: RunInputs) -> Inputs:
    """This replica's batch as tensors, fingerprinted; under MirroredStrategy each replica's own batch on its own
    device, handed to each replica by strategy.run."""
    if getattr(params, "inputs", "device") == "host":  # replicas: 1 only (refused in the plan otherwise)
        pipeline = host_pipeline(training, params, dev.placement, run)
        return Inputs(None, None, pipeline.fingerprint, None, [], pipeline.api, pipeline, pipeline.pipeline)
    replica = run.replica
    nhwc = channels_last(training, params)
    features_host, labels_host = training.batch(params, run.seed, 0 if replica is None else replica.rank,
                                                channels_last=nhwc, probe=run.probe)
    features = tf.constant(features_host)
    labels = tf.constant(labels_host)
    del features_host, labels_host
    # what reached the device, read back in the neutral (NCHW) layout: equal on two backends means equal
    # inputs. A capacity probe skips it (compared with nothing; seconds of copying and hashing at its batches)
    inputs_fingerprint = None
    if not run.probe:
        features_back = features.numpy()
        if nhwc:
            features_back = features_back.transpose(0, 3, 1, 2)
        inputs_fingerprint = fingerprint(features_back, labels.numpy())
        del features_back
    strategy = dev.strategy if replica is not None else None
    in_process = list(dev.tf_devices) if strategy is not None else []
    if len(in_process) > 1:
        features, labels = mirrored_batches(training, params, run, features, labels, strategy, in_process)
    return Inputs(features, labels, inputs_fingerprint, strategy, in_process, fields=input_pipeline("device"))


def mirrored_batches(training: Training, params, run: RunInputs, features, labels, strategy, in_process: list[str]):
    """MirroredStrategy: this process holds every replica. Replica i trains on rank i's batch (as the worker
    of rank i would), placed on its own device; the distributed values hand each replica its own."""
    per_replica = []
    for i, tf_device in enumerate(in_process):
        if i == 0:
            with tf.device(tf_device):
                per_replica.append((tf.identity(features), tf.identity(labels)))
            continue
        x_host, y_host = training.batch(params, run.seed, run.replica.rank + i,
                                        channels_last=channels_last(training, params), probe=run.probe)
        with tf.device(tf_device):
            per_replica.append((tf.constant(x_host), tf.constant(y_host)))
        del x_host, y_host
    del features, labels
    return (strategy.experimental_distribute_values_from_function(partial(_replica_part, per_replica, 0)),
            strategy.experimental_distribute_values_from_function(partial(_replica_part, per_replica, 1)))


def _replica_part(per_replica: list, part: int, context):
    """The features (part 0) or labels (part 1) of the replica `context` is in."""
    return per_replica[context.replica_id_in_sync_group][part]


def host_pipeline(training: Training, params, placement, run: RunInputs) -> HostFeed:
    """tf.data over the host dataset in the model's layout (NHWC transposed on the host under channels_last, as
    `inputs: device` does), repeated, prefetched to a GPU or prefetched on the CPU."""
    nhwc = channels_last(training, params)
    batches = host_batches(training.batch, params, run.seed, channels_last=nhwc, probe=run.probe)
    nbytes = batch_bytes(*batches[0])
    with tf.device("/CPU:0"):  # the dataset lives in host memory, whatever the step's device
        features = tf.constant(np.stack([x for x, _ in batches]))
        labels = tf.constant(np.stack([y for _, y in batches]))
        del batches
        dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat()
    if placement.is_gpu:
        dataset = dataset.apply(tf.data.experimental.prefetch_to_device(placement.tf_name, PREFETCHED_BATCHES))
        described = (f"tf.data.Dataset.from_tensor_slices(...).repeat()"
                     f".apply(tf.data.experimental.prefetch_to_device({placement.tf_name!r}, {PREFETCHED_BATCHES}))")
    else:
        dataset = dataset.prefetch(PREFETCHED_BATCHES)
        described = (f"tf.data.Dataset.from_tensor_slices(...).repeat().prefetch({PREFETCHED_BATCHES}) (on the CPU the "
                     "batch is already in the memory the step reads: no copy to a device)")
    inputs_fingerprint = None
    if not run.probe:
        check = iter(dataset)
        inputs_fingerprint = dataset_fingerprint(lambda: tuple(t.numpy() for t in next(check)), nhwc)
        del check
    stream = iter(dataset)
    # prefetch_to_device copies from the dataset's ordinary host tensors (tf.data pins nothing itself) on
    # TensorFlow's host-to-device stream, one batch ahead of the step
    fields = input_pipeline("host", prefetch_depth=PREFETCHED_BATCHES, pinned=False,
                            copy_stream="side" if placement.is_gpu else None, copy_per_step=True)
    return HostFeed(next=lambda: next(stream), fingerprint=inputs_fingerprint, api=pipeline_api(described, nbytes),
                    bytes_per_step=nbytes, dataset=dataset, pipeline=fields)
