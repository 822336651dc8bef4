"""A training workload's batches on torch: one resident on the device, or fed from host memory by a DataLoader.

The batches are the workload's own (Training.batch, drawn from the scenario's seed). `inputs: host` is what a
torch user's loop does with an in-memory dataset: a DataLoader over the host batches with pin_memory (on
CUDA), and a prefetcher (the data_prefetcher of NVIDIA's and timm's ImageNet training scripts) that copies the
next batch with .to(device, non_blocking=True) on a side CUDA stream while the step on the current one runs, so
the copy overlaps the step as TensorFlow's prefetch_to_device and the JAX plugin's one-ahead device_put do; for
images in channels_last the batch is put in that memory format on the device (as `inputs: device` does with its
one batch). Under a whole-step CUDA graph each step's batch is copied into the graph's static inputs instead, on
the step's stream (what torch's CUDA Graphs documentation prescribes).
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
    input_pipeline,
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
    #: the record's api.input_pipeline (harness.workloads.host_inputs.input_pipeline)
    pipeline: dict | None = None


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
    return Feed(next=lambda: (features, labels), fingerprint=inputs_fingerprint, api=DEVICE_API,
                pipeline=input_pipeline("device"))


class Prefetcher:
    """Host batches copied to the device one batch ahead of the step that reads them.

    With a side `stream` (CUDA), the copy of batch i+1 is issued on it while the step on batch i runs on the
    current stream; before batch i+1 is handed out the current stream waits for the side stream (wait_stream),
    and each of its tensors is marked as used by the current stream (record_stream), so the caching allocator
    does not hand its memory to a later copy while the step still reads it. Without a stream (the CPU) the same
    order holds, and `to_device` copies nothing. `use_stream` and `current_stream` are torch.cuda's, passed in
    so the order can be held by a test without a GPU.
    """

    def __init__(self, batches, to_device: Callable[[Any], tuple[Any, ...]], stream=None, *,
                 use_stream: Callable[[Any], Any] | None = None, current_stream: Callable[[], Any] | None = None):
        self.batches, self.to_device, self.stream = batches, to_device, stream
        self.use_stream = use_stream or torch.cuda.stream
        self.current_stream = current_stream or torch.cuda.current_stream
        self.ahead = self._issue()

    def _issue(self) -> tuple[Any, ...]:
        host = next(self.batches)
        if self.stream is None:
            return self.to_device(host)
        with self.use_stream(self.stream):
            return self.to_device(host)

    def next(self) -> tuple[Any, ...]:
        """The batch copied ahead, ready for the current stream; the next one's copy issued."""
        batch = self.ahead
        if self.stream is not None:
            current = self.current_stream()
            current.wait_stream(self.stream)
            for tensor in batch:
                tensor.record_stream(current)
        self.ahead = self._issue()
        return batch


def host_feed(draw: Draw, p, dev, run: RunInputs, *, channels_last: bool = False) -> Feed:
    """A DataLoader over the host dataset (whole batches, batch_size=None: the dataset is already batched),
    pinned on CUDA, cycled; a Prefetcher copies each batch one step ahead on a side CUDA stream (under a
    whole-step CUDA graph, each step's batch is copied into the graph's inputs on its own stream instead)."""
    batches = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in host_batches(draw, p, run.seed, probe=run.probe)]
    cuda = dev.type == "cuda"
    loader = torch.utils.data.DataLoader(batches, batch_size=None, shuffle=False, num_workers=0, pin_memory=cuda)
    nbytes = batch_bytes(batches[0][0].numpy(), batches[0][1].numpy())

    def to_device(batch):
        features, labels = batch
        return (_in_format(features.to(dev, non_blocking=True), channels_last), labels.to(dev, non_blocking=True))

    def prefetcher() -> Prefetcher:
        return Prefetcher(cycled(loader), to_device, torch.cuda.Stream(dev) if cuda else None)

    inputs_fingerprint = None
    if not run.probe:
        check = prefetcher()
        inputs_fingerprint = dataset_fingerprint(lambda: tuple(t.cpu().numpy() for t in check.next()),
                                                 channels_last=False)
        del check
    stream = cycled(loader)
    loaded = f"torch.utils.data.DataLoader(batch_size=None, num_workers=0, pin_memory={cuda})"
    on_cpu = " (on the CPU the batch is already where the step reads it: .to() copies nothing)" if not cuda else ""
    if getattr(p, "execution", "eager") == "cuda_graph":

        def refill(features, labels):
            host_features, host_labels = next(stream)
            features.copy_(host_features, non_blocking=True)
            labels.copy_(host_labels, non_blocking=True)

        return Feed(next=lambda: to_device(next(stream)), fingerprint=inputs_fingerprint,
                    api=pipeline_api(f"{loaded}, copied into the graph's static inputs on the step's stream{on_cpu}",
                                     nbytes), bytes_per_step=nbytes, refill=refill,
                    pipeline=input_pipeline("host", pinned=cuda, copy_stream="compute" if cuda else None,
                                            copy_per_step=True))
    ahead = prefetcher()
    described = (f"{loaded}; the next batch .to({dev.type}, non_blocking=True) one step ahead"
                 + (" on a side torch.cuda.Stream (wait_stream, record_stream)" if cuda else on_cpu))
    return Feed(next=ahead.next, fingerprint=inputs_fingerprint, api=pipeline_api(described, nbytes),
                bytes_per_step=nbytes, pipeline=input_pipeline("host", prefetch_depth=1, pinned=cuda,
                                                               copy_stream="side" if cuda else None,
                                                               copy_per_step=True))


def cycled(loader):
    """The loader's batches without end: a new pass over the loader when one ends."""
    return itertools.chain.from_iterable(itertools.repeat(loader))
