"""A training workload's batches on torch: one resident on the device, or fed from host memory by a DataLoader.

The batches are the workload's own (Training.batch, drawn from the scenario's seed). `inputs: host` is what a
torch user's loop does with an in-memory dataset: a DataLoader over the host batches with pin_memory (on
CUDA), each batch moved with .to(device, non_blocking=True) inside the step, then, for images in
channels_last, put in that memory format on the device (as `inputs: device` does with its one batch).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from harness.seam.adapter import RunInputs
from harness.workloads.base import fingerprint
from harness.workloads.host_inputs import (
    DEVICE_API,
    batch_bytes,
    dataset_fingerprint,
    host_batches,
    pipeline_api,
)

#: Training.batch: (params, seed, rank, *, channels_last, probe, batch) -> (features, labels) as numpy
Draw = Callable[..., tuple[np.ndarray, np.ndarray]]


@dataclass
class Feed:
    """Where a step's batch comes from: `next()` gives the (features, labels) on the device a step consumes."""

    next: Callable[[], tuple[Any, Any]]
    #: the batches that reached the device, read back and hashed in the neutral layout; None for a capacity probe
    fingerprint: str | None
    #: the record's api.inputs
    api: str
    #: bytes one step copies from host to device (0: the batch stays on the device)
    bytes_per_step: int = 0
    #: inputs: host under a CUDA graph: copies the next host batch into the graph's static input tensors
    refill: Callable[[Any, Any], None] | None = None


def build_feed(draw: Draw, p, dev, run: RunInputs, *, channels_last: bool = False) -> Feed:
    """This run's batches from the workload's `draw`: `inputs: device` (the replica's one batch, resident) or
    `inputs: host` (a DataLoader); `channels_last`: image batches in torch.channels_last on the device."""
    if getattr(p, "inputs", "device") == "host":
        return host_feed(draw, p, dev, run, channels_last=channels_last)
    return device_feed(draw, p, dev, run, channels_last=channels_last)


def _in_format(features, channels_last: bool):
    return features.contiguous(memory_format=torch.channels_last) if channels_last else features


def device_feed(draw: Draw, p, dev, run: RunInputs, *, channels_last: bool = False) -> Feed:
    """This replica's synthetic batch on the device (images in the memory format), reused by every step."""
    replica = run.replica
    # channels_last is drawn (N, H, W, 3) on the host and viewed as NCHW with channels_last strides, which
    # .to() keeps: one copy of the batch reaches the device (a .contiguous(channels_last) there would hold it
    # twice for a moment and leave the first copy in the allocator's cache)
    features_np, labels_np = draw(p, run.seed, 0 if replica is None else replica.rank, channels_last=channels_last,
                                  probe=run.probe)
    host = torch.from_numpy(features_np)
    features = (host.permute(0, 3, 1, 2) if channels_last else host).to(dev)
    labels = torch.from_numpy(labels_np).to(dev)
    del features_np, labels_np, host  # on a GPU the host batch is dropped once on the device: only the step's copy stays
    # what reached the device, read back in the neutral layout: equal on two backends means equal inputs.
    # A capacity probe skips it: its record is compared with none, and reading back and hashing the batch
    # costs seconds at the batches probes reach (0.7 GB at 1134 images)
    inputs_fingerprint = None if run.probe else fingerprint(features.cpu().numpy(), labels.cpu().numpy())
    return Feed(next=lambda: (features, labels), fingerprint=inputs_fingerprint, api=DEVICE_API)


def host_feed(draw: Draw, p, dev, run: RunInputs, *, channels_last: bool = False) -> Feed:
    """A DataLoader over the host dataset (whole batches, batch_size=None: the dataset is already batched),
    pinned on CUDA, cycled; each next() moves one batch to the device without blocking the host."""
    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in host_batches(draw, p, run.seed, probe=run.probe)]
    pin = dev.type == "cuda"
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False, num_workers=0, pin_memory=pin)
    nbytes = batch_bytes(batches[0][0].numpy(), batches[0][1].numpy())

    def to_device(batch):
        features, labels = batch
        return (_in_format(features.to(dev, non_blocking=True), channels_last), labels.to(dev, non_blocking=True))

    def read_back():
        features, labels = to_device(next(check))
        return features.cpu().numpy(), labels.cpu().numpy()

    check = iter(loader)
    inputs_fingerprint = None if run.probe else dataset_fingerprint(read_back, channels_last=False)
    stream = itertools.chain.from_iterable(itertools.repeat(loader))  # a new pass over the loader when one ends

    def refill(features, labels):
        host_features, host_labels = next(stream)
        features.copy_(host_features, non_blocking=True)
        labels.copy_(host_labels, non_blocking=True)

    described = (f"torch.utils.data.DataLoader(batch_size=None, num_workers=0, pin_memory={pin}), "
                 f"batch.to({dev.type}, non_blocking=True)"
                 + ("" if pin else " (on the CPU the batch is already where the step reads it: .to() copies nothing)"))
    return Feed(next=lambda: to_device(next(stream)), fingerprint=inputs_fingerprint,
                api=pipeline_api(described, nbytes), bytes_per_step=nbytes, refill=refill)
