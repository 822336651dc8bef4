"""jax.profiler for the profile breakdown (harness.timing.profile): a few steps after the timed blocks under
jax.profiler's trace, its XSpace read with JAX's own `ProfileData` (harness.timing.xspace chooses the spans).

On a GPU the spans are the kernels, copies and sets of the GPU's streams; on the CPU, XLA's HLO ops (the
events carrying an `hlo_op` stat) on the host's threads, named by their op.
"""

from __future__ import annotations

from typing import Any, Callable

from harness.timing import xspace
from harness.timing.profile import GPU_LIBRARY_RULES, Capture, Rules
from harness.timing.xspace import XEvent, XSpaceProfiler, newest_xspace

#: The annotation around the profiled steps: its span on the host plane is the window.
WINDOW = "harness.profiled_steps"

#: XLA's names first: fusions by their kind (a loop fusion is elementwise, an input fusion a reduction, as
#: one kernel fuses several HLO ops), then HLO ops, then the NVIDIA libraries'.
JAX_RULES = Rules([
    ("comm", r"nccl|all-reduce|all-gather|reduce-scatter|collective-permute|all-to-all"),
    ("copy", r"^copy-(start|done)|memcpy"),
    ("layout", r"transpose|copy\w*_fusion|^copy(\.\d+)?$"),
    ("matmul", r"^gemm_fusion|triton_gemm|^cublas|^dot(\.\d+)?$|dot_fusion"),
    ("conv", r"^convolution|cudnn\$?conv|conv_fusion"),
    ("reduce", r"^input_\w*fusion|reduce|reduction"),
    ("elementwise", r"^loop_\w*fusion|^fusion(\.\d+|_\d+)?$|_fusion(\.\d+|_\d+)?$|^wrapped_|ynn_fusion|"
                    r"^(add|multiply|subtract|divide|maximum|minimum|exponential|rsqrt|sqrt|select|convert|negate|"
                    r"compare)(\.\d+)?$"),
    *GPU_LIBRARY_RULES,
])


def _kind(event) -> str:
    """A host event's HLO op (its `hlo_op` stat), or "" for the runtime's own events."""
    for name, value in event.stats:
        if name == "hlo_op":
            return str(value)
    return ""


def read_xspace(path: str) -> list[XEvent]:
    """Every event of an `.xplane.pb` file through jax.profiler.ProfileData, starts in ns."""
    from jax.profiler import ProfileData

    out = []
    for plane in ProfileData.from_file(path).planes:
        host = plane.name == "/host:CPU"
        for line in plane.lines:
            for event in line.events:
                out.append(XEvent(plane.name, line.name, event.name, float(event.start_ns), float(event.duration_ns),
                                  _kind(event) if host else ""))
    return out


def profiled(step: Callable[[], Any], sync: Callable[[], None], steps: int, logdir: str) -> str:
    """Run `steps` steps under jax.profiler inside the window annotation, the device waited for before it
    closes; the XSpace file it wrote."""
    import jax

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
