"""resnet50_train's `inputs: host` on JAX: the host batches put on the device one step ahead.

What a JAX user's loop does with an in-memory dataset (Flax's examples' prefetch_to_device): before
the step on batch i is dispatched, jax.device_put of batch i+1 is issued, so its copy overlaps the
step; the step consumes the batch put during the step before. Images are in the model's layout
(transposed to NHWC on the host under channels_last, as `inputs: device` does), labels int32 (JAX
without x64).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Callable

import numpy as np

from harness.seam.adapter import RunInputs
from harness.workloads.host_inputs import (
    HostFeed,
    batch_bytes,
    dataset_fingerprint,
    host_batches,
    pipeline_api,
)
from harness.workloads.resnet50_train import synthetic_batch

#: Batches put on the device ahead of the step that consumes them.
AHEAD = 1


def prefetched(put: Callable[[Any], Any], batches: list) -> Callable[[], tuple[Any, Any]]:
    """A cycle over the host `batches`, each put on the device AHEAD batches before it is taken."""
    cycle = itertools.cycle(batches)
    queue: deque = deque(put(next(cycle)) for _ in range(AHEAD))

    def take():
        queue.append(put(next(cycle)))  # the next batch's copy is issued before this step runs
        return queue.popleft()

    return take


def host_feed(p, device, run: RunInputs, layout: str) -> HostFeed:
    """The host dataset in the model's `layout` with int32 labels, fed by prefetched jax.device_put."""
    channels_last = layout == "NHWC"
    batches = [(x, y.astype(np.int32)) for x, y in host_batches(synthetic_batch, p, run.seed, channels_last=channels_last,
                                                                 probe=run.probe)]
    nbytes = batch_bytes(*batches[0])
    fingerprint = None
    if not run.probe:
        check = prefetched(device.put, batches)
        fingerprint = dataset_fingerprint(lambda: tuple(np.asarray(a) for a in check()), channels_last)
    described = f"jax.device_put of the next batch issued {AHEAD} step ahead (prefetch), labels int32"
    if not device.is_gpu:
        described += " (on the CPU the copy stays in host memory)"
    return HostFeed(next=prefetched(device.put, batches), fingerprint=fingerprint,
                    api=pipeline_api(described, nbytes), bytes_per_step=nbytes)
