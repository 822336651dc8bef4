"""Where each training step's batch comes from on JAX, for any training workload (its Training.batch).

`inputs: device`: one batch drawn from the seed, put on the device once and read by every step. `inputs: host`:
what a JAX user's loop does with an in-memory dataset (Flax's examples' prefetch_to_device): before the step on
batch i is dispatched, jax.device_put of batch i+1 is issued, so its copy overlaps the step; the step consumes
the batch put during the step before. An image workload's images are in the model's layout (transposed to NHWC
on the host under channels_last); labels, and integer features (a language model's token ids), are int32 (JAX
keeps 64-bit integers only with jax_enable_x64, which would change every default dtype), read back as int64 for
the fingerprint, as the other backends hold them.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np

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
from harness.workloads.training import Training

#: Batches put on the device ahead of the step that consumes them.
AHEAD = 1


@dataclass(frozen=True)
class Feed:
    """A training run's inputs: `next()` gives the (features, labels) a step consumes."""

    next: Callable[[], tuple[Any, Any]]
    #: what reached the device, read back and hashed in the neutral layout; None for a host feed's capacity probe
    fingerprint: str | None
    #: the record's api.inputs and api.data
    api: str
    data: str
    #: bytes one step copies from host to device (0: none)
    bytes_per_step: int
    #: the shape and dtype of one item's features (a batch of one), from which the model is initialised
    example: jax.ShapeDtypeStruct
    #: the record's api.input_pipeline (harness.workloads.host_inputs.input_pipeline)
    pipeline: dict | None = None


def _example(features: np.ndarray) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((1, *features.shape[1:]), features.dtype)


def _x32(features: np.ndarray) -> np.ndarray:
    """Integer features as int32 (JAX without x64); float features as they are."""
    return features.astype(np.int32) if np.issubdtype(features.dtype, np.integer) else features


def _neutral(features: np.ndarray) -> np.ndarray:
    """Features read back from the device in the neutral dtype: integers as int64."""
    return features.astype(np.int64) if np.issubdtype(features.dtype, np.integer) else features


def build_feed(training: Training, p, device, run: RunInputs, channels_last: bool) -> Feed:
    """The run's feed: the host dataset under `inputs: host`, else one batch resident on the device."""
    if getattr(p, "inputs", "device") == "host":
        return host_feed(training, p, device, run, channels_last)
    return device_feed(training, p, device, run, channels_last)


def device_feed(training: Training, p, device, run: RunInputs, channels_last: bool) -> Feed:
    """One batch from the seed on the device, reused by every step; its fingerprint read back from the device."""
    features_host, labels_host = training.batch(p, run.seed, channels_last=channels_last, probe=run.probe)
    features_host = _x32(features_host)
    example = _example(features_host)
    features = device.put(features_host)
    labels = device.put(labels_host.astype(np.int32))
    del features_host, labels_host
    # what reached the device, read back in the neutral layout (NCHW images, int64 labels): equal on two backends
    # means equal inputs
    back = _neutral(np.asarray(features))
    if channels_last:
        back = back.transpose(0, 3, 1, 2)
    inputs_fingerprint = fingerprint(back, np.asarray(labels).astype(np.int64))
    del back
    kind = "images" if training.images else "features"
    data = (f"{kind} {example.dtype} and labels int32 (JAX without x64) resident on the device, "
            "jax.device_put once")
    return Feed(next=lambda: (features, labels), fingerprint=inputs_fingerprint, api=DEVICE_API, data=data,
                bytes_per_step=0, example=example, pipeline=input_pipeline("device"))


def prefetched(put: Callable[[Any], Any], batches: list) -> Callable[[], tuple[Any, Any]]:
    """A cycle over the host `batches`, each put on the device AHEAD batches before it is taken."""
    cycle = itertools.cycle(batches)
    queue: deque = deque(put(next(cycle)) for _ in range(AHEAD))

    def take():
        queue.append(put(next(cycle)))  # the next batch's copy is issued before this step runs
        return queue.popleft()

    return take


def host_feed(training: Training, p, device, run: RunInputs, channels_last: bool) -> Feed:
    """The host dataset in the model's layout with int32 labels, fed by prefetched jax.device_put."""
    batches = [(_x32(x), y.astype(np.int32)) for x, y in host_batches(training.batch, p, run.seed,
                                                                 channels_last=channels_last, probe=run.probe)]
    nbytes = batch_bytes(*batches[0])
    inputs_fingerprint = None
    if not run.probe:
        check = prefetched(device.put, batches)
        inputs_fingerprint = dataset_fingerprint(lambda: tuple(_neutral(np.asarray(a)) for a in check()), channels_last)
    described = f"jax.device_put of the next batch issued {AHEAD} step ahead (prefetch), labels int32"
    if not device.is_gpu:
        described += " (on the CPU the copy stays in host memory)"
    api = pipeline_api(described, nbytes)
    # device_put copies from the numpy arrays' ordinary host memory (JAX pins nothing itself) on the runtime's
    # host-to-device stream, issued AHEAD steps before the step that reads the batch
    fields = input_pipeline("host", prefetch_depth=AHEAD, pinned=False, copy_stream="side" if device.is_gpu else None,
                            copy_per_step=True)
    return Feed(next=prefetched(device.put, batches), fingerprint=inputs_fingerprint, api=api, data=api,
                bytes_per_step=nbytes, example=_example(batches[0][0]), pipeline=fields)
