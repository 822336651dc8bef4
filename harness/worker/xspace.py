"""The XSpace profile format that TensorFlow's profiler and XLA's (JAX's) both write, read into spans.

A backend reads its profiler's `.xplane.pb` with its own framework's reader (TensorFlow ships the protobuf
definitions, JAX its `ProfileData`) into `XEvent`s; the choice of the spans a breakdown counts is the same
for both and is made here: on a GPU the events of the device plane's `Stream` lines (kernels, copies,
sets; the derived lines beside them, `XLA Ops`, `TensorFlow Ops`, `Steps`, repeat those and are left out),
on the CPU the framework's op events of the host plane, which the backend marks with their op's kind.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.worker.profile import Span

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
