"""The XSpace profile format that TensorFlow's profiler and XLA's (JAX's) both write, read into spans.

A backend reads its profiler's `.xplane.pb` with its own framework's reader (TensorFlow ships the protobuf
definitions, JAX its `ProfileData`) into `XEvent`s; the choice of the spans a breakdown counts is the same
for both and is made here: on a GPU the events of the device plane's `Stream` lines (kernels, copies,
sets; the derived lines beside them, `XLA Ops`, `TensorFlow Ops`, `Steps`, repeat those and are left out),
on the CPU the framework's op events of the host plane, which the backend marks with their op's kind.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from typing import Any, Callable

from harness.timing.profile import Capture, Rules, Span, TraceProfiler, capture_trace

#: The host plane and a GPU's device plane, as the XSpace format names them.
HOST_PLANE = "/host:CPU"
GPU_PLANE = "/device:GPU:"
#: XLA's number of one instance of an HLO op (`convolution.4`)
INSTANCE = re.compile(r"\.\d+$")


@dataclass(frozen=True)
class XEvent:
    """One event of an XSpace: its plane and line, its name, start and duration (ns on the host's clock) and,
    for a framework's op on the host, the op's kind (TensorFlow's op type, XLA's HLO op); else ""."""

    plane: str
    line: str
    name: str
    start_ns: float
    duration_ns: float
    kind: str = ""

    def span(self, name: str | None = None) -> Span:
        """The event as a breakdown's span (seconds), named `name` or its own name."""
        start = self.start_ns / 1e9
        return Span(name or self.name, start, start + self.duration_ns / 1e9, f"{self.plane} {self.line}")


def window_of(events: list[XEvent], annotation: str) -> tuple[float, float]:
    """(start, end), in seconds, of the host-plane annotation that surrounds the profiled steps; ValueError
    where the trace lacks it."""
    found = [e for e in events if e.plane == HOST_PLANE and e.name == annotation]
    if not found:
        raise ValueError(f"the profile has no {annotation!r} annotation on {HOST_PLANE}")
    span = found[0].span()
    return span.start_s, span.end_s


def gpu_spans(events: list[XEvent], index: int) -> list[Span]:
    """The kernels, copies and sets on the streams of GPU `index` (of the one GPU plane there is, where the
    profiler numbered it otherwise, as it may under CUDA_VISIBLE_DEVICES)."""
    planes = {e.plane for e in events if e.plane.startswith(GPU_PLANE)}
    plane = f"{GPU_PLANE}{index}"
    if plane not in planes and len(planes) == 1:
        plane = planes.pop()
    return [e.span() for e in events
            if e.plane == plane and e.line.startswith("Stream") and e.duration_ns > 0]


def host_op_spans(events: list[XEvent]) -> list[Span]:
    """The framework's ops on the host's threads, each named by its kind (op type, HLO op, without the number
    XLA gives each instance), so that the rules and the top list see `Conv2D` or `convolution`, not one op."""
    return [e.span(INSTANCE.sub("", e.kind)) for e in events if e.plane == HOST_PLANE and e.kind and e.duration_ns > 0]


def newest_xspace(logdir: str, profiler: str) -> str:
    """The `.xplane.pb` the profiler wrote last under logdir; FileNotFoundError (naming `profiler`) where it
    wrote none."""
    found = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not found:
        raise FileNotFoundError(f"{profiler} wrote no .xplane.pb under {logdir}")
    return max(found, key=os.path.getmtime)


@dataclass(frozen=True)
class XSpaceProfiler:
    """What differs between the frameworks that write XSpace: the profiler's name, how it runs `steps` steps
    inside the window annotation into a log folder (returning the `.xplane.pb`), how its file is read, the
    annotation, what the host's op events are, and the backend's rules."""

    name: str
    profiled: Callable[[Callable[[], Any], Callable[[], None], int, str], str]
    read: Callable[[str], list[XEvent]]
    window: str
    host_ops: str
    rules: Rules


def capture(profiler: XSpaceProfiler, step: Callable[[], Any], sync: Callable[[], None], gpu_index: int | None,
            steps: int, trace_dir: str | None) -> Capture:
    """One step, then `steps` under the profiler (harness.timing.profile.capture_trace); the breakdown's capture
    (GPU `gpu_index`'s streams, or the host's op events where it is None). Raises where the profiler cannot run
    or saw nothing."""

    def read(path: str) -> tuple[list[Span], tuple[float, float]]:
        events = profiler.read(path)
        spans = gpu_spans(events, gpu_index) if gpu_index is not None else host_op_spans(events)
        return spans, window_of(events, profiler.window)

    gpu = gpu_index is not None
    return capture_trace(TraceProfiler(
        name=profiler.name,
        source=f"{profiler.name} (XSpace): " + ("GPU stream kernels, copies and sets" if gpu else profiler.host_ops),
        activity="gpu" if gpu else "cpu", rules=profiler.rules,
        record=lambda step, sync, steps, folder: (profiler.profiled(step, sync, steps, folder), []), read=read,
    ), step, sync, steps, trace_dir)
