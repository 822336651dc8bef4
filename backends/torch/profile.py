"""torch.profiler for the profile breakdown (harness.timing.profile): a few steps after the timed blocks,
read from the profiler's own Chrome trace, which is also the raw trace kept where the user asks.

On a GPU the spans are the CUDA kernels, copies and sets CUPTI saw; on the CPU, the outermost `aten::`
ops of each thread (an op's nested ops are part of it; autograd's and Python's time between ops is idle).
"""

from __future__ import annotations

import contextlib
import json
import os
from functools import partial
from typing import Any, Callable, Iterator

from harness.timing.profile import (
    ATTENTION_RULE,
    GPU_LIBRARY_RULES,
    WINDOW,
    Capture,
    Rules,
    Span,
    TraceProfiler,
    capture_trace,
)

#: torch's names first (Inductor's Triton kernels by kind: one kernel fuses several ops; ATen's CUDA
#: kernels and CPU ops), then the NVIDIA libraries'. docs/profile.md explains each class.
TORCH_RULES = Rules([
    ATTENTION_RULE,
    ("comm", r"c10d::|gloo|nccl"),
    ("copy", r"direct_copy_kernel|aten::copy_|aten::_to_copy|^aten::to$|aten::clone"),
    ("matmul", r"triton_tem_|triton_.*_mm_|extern_kernels\.(mm|addmm|bmm)"),
    ("reduce", r"triton_(red|per)_"),
    ("elementwise", r"triton_poi_"),
    ("norm", r"batch_norm|batchnorm|layer_norm|group_norm|welford"),
    ("conv", r"convolution|conv2d|cudnn_conv|mkldnn_conv"),
    ("matmul", r"aten::(mm|addmm|bmm|matmul|linear)\b|addmmbackward|mmbackward"),
    ("layout", r"aten::(contiguous|permute|transpose|t)$|channels_last"),
    ("reduce", r"reduce_kernel|aten::(sum|mean|max|min|amax|norm)\b|softmax|nll_loss|cross_entropy|pool"),
    ("elementwise", r"aten::(add|mul|sub|div|relu|threshold|fill|zero|addcmul|addcdiv|sqrt|lerp|where|neg|gelu)|"
                    r"_foreach_|relubackward|threshold_backward|clamp|cast"),
    *GPU_LIBRARY_RULES,
])


def _events(path: str) -> list[dict]:
    """The complete events (`ph` X) of a Chrome trace torch wrote."""
    with open(path, encoding="utf-8") as fh:
        trace = json.load(fh)
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e]


def _span(event: dict) -> Span:
    start = float(event["ts"]) / 1e6
    return Span(str(event.get("name", "")), start, start + float(event["dur"]) / 1e6,
                str(event.get("args", {}).get("stream", event.get("tid", ""))))


def _outermost(events: list[dict]) -> list[dict]:
    """Per thread, the ops that no other op of that thread contains."""
    kept: list[dict] = []
    ends: dict[Any, float] = {}
    for event in sorted(events, key=lambda e: (float(e["ts"]), -float(e["dur"]))):
        end = float(event["ts"]) + float(event["dur"])
        if float(event["ts"]) >= ends.get(event.get("tid"), float("-inf")):
            kept.append(event)
            ends[event.get("tid")] = end
    return kept


def spans_of_trace(path: str, gpu: bool) -> tuple[list[Span], tuple[float, float]]:
    """The spans of a torch Chrome trace (GPU kernels, or the CPU's outermost aten ops) and the window of
    the `WINDOW` annotation; ValueError where the trace has no window."""
    events = _events(path)
    window = [e for e in events if e.get("name") == WINDOW and str(e.get("cat", "")).lower() == "user_annotation"]
    if not window:
        raise ValueError(f"the torch trace {path} has no {WINDOW} annotation")
    low = _span(window[0])
    if gpu:
        kinds = ("kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset")
        chosen = [e for e in events if str(e.get("cat", "")).lower() in kinds]
    else:
        ops = [e for e in events
               if str(e.get("cat", "")).lower() == "cpu_op" and str(e.get("name", "")).startswith("aten::")]
        chosen = _outermost(ops)
    return [_span(e) for e in chosen], (low.start_s, low.end_s)


#: What a GPU capture says of the Python-side profiler events it leaves out (`launch_events_off`).
LAUNCH_EVENTS_NOTE = ("torch's Python-side profiler events (a torch.compile step's one per Triton launch) were off in "
                      "the window, as they are when the step is timed; CUPTI records every kernel either way")


@contextlib.contextmanager
def launch_events_off() -> Iterator[bool]:
    """Within the block, torch's Python code sees no profiler running (torch.autograd.profiler's flag): a profiler on
    makes torch.compile's Triton launcher leave its fast path and wrap every launch in a profiler event of its own
    (torch/_inductor/runtime/triton_heuristics.py; Dynamo and AOTAutograd add a few more), host work the timed step
    never does. A compiled ResNet-50 step of about 900 short kernels turned launch-bound under the profiler on the
    H200 (its profiled step 46% longer than the timed one). The flag only adds annotations; the kernels, which CUPTI
    records, are the same. Yields whether it had anything to turn off (torch 2.0 has no such flag)."""
    from torch.autograd import profiler as autograd_profiler

    if not hasattr(autograd_profiler, "_set_is_profiler_enabled"):
        yield False
        return
    before = autograd_profiler._is_profiler_enabled
    autograd_profiler._set_is_profiler_enabled(False)
    try:
        yield before
    finally:
        autograd_profiler._set_is_profiler_enabled(before)


def record(gpu: bool, step: Callable[[], Any], sync: Callable[[], None], steps: int,
           folder: str) -> tuple[str, list[str]]:
    """Run `steps` steps under torch.profiler inside the window annotation (the device waited for before it
    closes) and write its Chrome trace under `folder`; (the trace, notes on the recording)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with profile(activities=activities) as prof:
        # on the CPU the ops are what is recorded, and their annotations stay
        with launch_events_off() if gpu else contextlib.nullcontext(False) as turned_off:
            with record_function(WINDOW):
                for _ in range(steps):
                    step()
                sync()
    path = os.path.join(folder, f"torch-trace-{os.getpid()}.json")
    prof.export_chrome_trace(path)
    return path, [LAUNCH_EVENTS_NOTE] if turned_off else []


def capture(step: Callable[[], Any], device, steps: int, trace_dir: str | None) -> Capture:
    """Run one step, then `steps` steps under torch.profiler inside the window annotation (the device waited
    for before it closes); the breakdown's capture. Raises where the profiler cannot run or saw nothing."""
    import torch

    gpu = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if gpu else (lambda: None)
    source = "torch.profiler: " + ("CUDA kernels, copies and sets (CUPTI)" if gpu else "outermost aten ops per thread")
    profiler = TraceProfiler(name="torch.profiler", source=source, activity="gpu" if gpu else "cpu",
                             rules=TORCH_RULES, record=partial(record, gpu), read=partial(spans_of_trace, gpu=gpu))
    return capture_trace(profiler, step, sync, steps, trace_dir)
