"""jax.profiler for the profile breakdown (harness.timing.profile): a few steps after the timed blocks under
jax.profiler's trace, its XSpace read with JAX's own `ProfileData` (harness.timing.xspace chooses the spans,
harness.timing.profile.capture_trace runs the capture).

On a GPU the spans are the kernels, copies and sets of the GPU's streams; on the CPU, XLA's HLO ops (the
events carrying an `hlo_op` stat) on the host's threads, named by their op. The table of classes is
harness_jax.rules.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax.profiler import ProfileData

from harness.timing import xspace
from harness.timing.profile import WINDOW, Capture
from harness.timing.xspace import XEvent, XSpaceProfiler, newest_xspace
from harness_jax.rules import JAX_RULES


def _kind(event) -> str:
    """A host event's HLO op (its `hlo_op` stat), or "" for the runtime's own events."""
    for name, value in event.stats:
        if name == "hlo_op":
            return str(value)
    return ""


def read_xspace(path: str) -> list[XEvent]:
    """Every event of an `.xplane.pb` file through jax.profiler.ProfileData, starts in ns."""
    out = []
    for plane in ProfileData.from_file(path).planes:
        host = plane.name == xspace.HOST_PLANE
        for line in plane.lines:
            for event in line.events:
                out.append(XEvent(plane.name, line.name, event.name, float(event.start_ns), float(event.duration_ns),
                                  _kind(event) if host else ""))
    return out


def profiled(step: Callable[[], Any], sync: Callable[[], None], steps: int, logdir: str) -> str:
    """Run `steps` steps under jax.profiler inside the window annotation, the device waited for before it
    closes; the XSpace file it wrote."""
    jax.profiler.start_trace(logdir)
    try:
        with jax.profiler.TraceAnnotation(WINDOW):
            for _ in range(steps):
                step()
            sync()
    finally:
        jax.profiler.stop_trace()
    return newest_xspace(logdir, "jax.profiler")


PROFILER = XSpaceProfiler(name="jax.profiler", profiled=profiled, read=read_xspace, window=WINDOW,
                          host_ops="XLA's HLO ops on the host's threads", rules=JAX_RULES)


def capture(step: Callable[[], Any], sync: Callable[[], None], gpu_index: int | None, steps: int,
            trace_dir: str | None) -> Capture:
    """One step, then `steps` under jax.profiler; the breakdown's capture (GPU `gpu_index`'s streams, or XLA's
    ops on the host where it is None). Raises where the profiler cannot run or saw nothing."""
    return xspace.capture(PROFILER, step, sync, gpu_index, steps, trace_dir)
