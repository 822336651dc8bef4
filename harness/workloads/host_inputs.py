"""`inputs: host` of a training workload, the framework-neutral half: the host dataset, what it costs, what says it.

Every backend draws the same HOST_BATCHES batches from the scenario's seed (the workload's Training.batch), keeps them
in host memory and feeds them through its framework's own input pipeline, one batch per training step;
each backend reads the pipeline's first pass back from the device and hashes it with
`dataset_fingerprint`, so equal fingerprints mean the same batches reached the step on every backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from harness.workloads.base import fingerprint

#: Distinct batches a host dataset holds. Four: each step reads a batch that the step before did not (no cache or
#: allocator can keep "the" batch hot), and at ResNet-50's batch 256 and 224 px (154 MB a batch in float32) the
#: dataset stays at 616 MB of host memory, plus what a pipeline keeps in flight.
HOST_BATCHES = 4


@dataclass
class HostFeed:
    """A backend's feed of the host dataset: `next()` gives the (images, labels) a training step consumes."""

    next: Callable[[], tuple[Any, Any]]
    #: the feed's first pass, read back and hashed in the neutral layout; None for a capacity probe
    fingerprint: str | None
    #: the record's api.inputs
    api: str
    #: bytes one step copies from host to device
    bytes_per_step: int
    #: the framework's own pipeline object, for a consumer that reads it itself (Keras's fit reads tf.data)
    dataset: Any = None
    #: the record's api.input_pipeline (input_pipeline below)
    pipeline: dict | None = None


def host_inputs_unsupported_reason(workload: str, params: dict) -> str | None:
    """Why `inputs: host` cannot run with these params on any backend (known before a worker starts); else None."""
    if params.get("inputs") != "host":
        return None
    if int(params.get("grad_accum") or 1) > 1:
        return ("inputs: host with grad_accum > 1: a step reads one batch from the input pipeline, and each "
                "micro-batch of a real accumulation would read its own; run grad_accum: 1 or inputs: device")
    if int(params.get("replicas") or 1) > 1:
        return ("inputs: host with replicas > 1: each replica would need its own sharded input pipeline, which "
                "harness does not build; run replicas: 1 or inputs: device")
    return None


def host_batches(draw: Callable[..., tuple[np.ndarray, np.ndarray]], p, seed: int, *, channels_last: bool = False,
                 probe: bool = False) -> list[tuple[np.ndarray, np.ndarray]]:
    """The host dataset: HOST_BATCHES (features, int64 labels) batches drawn by the workload's `draw`
    (Training.batch) from the scenario's seed, batch 0 the one `inputs: device` puts on the device; an image
    workload's (N, H, W, 3) images with `channels_last`."""
    return [draw(p, seed, channels_last=channels_last, probe=probe, batch=i) for i in range(HOST_BATCHES)]


def host_warmup_floor(p) -> int:
    """Under inputs: host, two passes of the host dataset before timing: a pipeline allocates its buffers
    (pinned host memory, staging copies) on the first pass and reuses them from the second, and on the H200
    the first timed blocks after two warm-up steps still ran 10-50% slower. Nothing under inputs: device."""
    return 2 * HOST_BATCHES if getattr(p, "inputs", "device") == "host" else 0


def batch_bytes(images: np.ndarray, labels: np.ndarray) -> int:
    """Bytes one step copies from host to device: its images and labels as the pipeline holds them."""
    return int(images.nbytes + labels.nbytes)


def dataset_fingerprint(read_back: Callable[[], tuple[np.ndarray, np.ndarray]], channels_last: bool) -> str:
    """The fingerprint of one pass of a pipeline: HOST_BATCHES batches from `read_back` (each as it reached the
    device, copied back to numpy), hashed in the neutral layout (NCHW float32, int64 labels) in order."""
    arrays: list[np.ndarray] = []
    for _ in range(HOST_BATCHES):
        images, labels = read_back()
        arrays += [images.transpose(0, 3, 1, 2) if channels_last else images, labels.astype(np.int64)]
    return fingerprint(*arrays)


def pipeline_api(framework_pipeline: str, nbytes: int) -> str:
    """The record's `api.inputs` for a host pipeline: what the framework does, the dataset, the copy per step."""
    return (f"host: {HOST_BATCHES} distinct synthetic batches in host memory, one per step through "
            f"{framework_pipeline}; {nbytes:,} bytes copied host to device per step")


DEVICE_API = "device: one synthetic batch resident on the device, reused by every step (no host-to-device copy)"


def input_pipeline(source: str, *, prefetch_depth: int = 0, pinned: bool = False, copy_stream: str | None = None,
                   copy_per_step: bool = False) -> dict:
    """The record's api.input_pipeline, the same keys on every backend so two records' pipelines compare field by
    field: `source` (`device`: one batch resident; `host`: the host dataset), `prefetch_depth` (batches copied
    ahead of the step that reads them), `pinned` (the pipeline itself puts the host batch in page-locked memory,
    as torch's pin_memory; False: the framework copies from ordinary host memory), `copy_stream` (`side`: the
    copy runs on a stream other than the step's, so it overlaps the step; `compute`: on the step's own stream;
    None: nothing is copied, as on the CPU), `copy_per_step` (each step copies a batch host to device on a GPU)."""
    return {"source": source, "prefetch_depth": int(prefetch_depth), "pinned": bool(pinned),
            "copy_stream": copy_stream, "copy_per_step": bool(copy_per_step)}
