"""Where a step's time goes: a neutral breakdown from the framework's own profiler, after the timed blocks.

A backend's device captures a few more steps with its framework's profiler (`Device.profile`) and hands
back a `Capture`: the spans it saw (GPU kernels on their streams, or on the CPU the framework's top-level
ops on their threads), the wall-clock window of the profiled steps on the same clock, and its own table
of `Rules` (kernel or op name -> class). A profiler that writes a trace file (torch's Chrome trace, the
XSpace of TensorFlow and JAX: harness.timing.xspace) is driven by `capture_trace`, which runs what they
share (a warm-up step, the profiled steps inside the WINDOW annotation, the trace kept or removed) around
the backend's own `TraceProfiler` (how it records, how it reads its trace back). Everything else is
written once here:

- each instant of the window covered by no span is `idle` (host work, launch and synchronisation gaps);
  it is measured from the timeline, never taken as a remainder;
- an instant covered by several spans at once (streams side by side, a copy beside compute, a
  collective beside a kernel) is counted once, shared equally among the spans running then, so the
  classes plus `idle` add up to the window; `overlap_s` says how much of the spans' own time ran beside
  another span;
- `other` is what no rule of the backend's table matched, and `other_share` its part of the busy time,
  so that a table falling behind a framework's new kernel names shows.

docs/profile.md gives the classes, their rules and how to read a breakdown.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

#: The annotation every backend's profiler puts around the profiled steps: its span on the trace is the window.
WINDOW = "harness.profiled_steps"
#: The classes of a breakdown, in display order; `idle` is beside them, never one of them.
CLASSES = ("conv", "matmul", "attention", "norm", "elementwise", "reduce", "layout", "copy", "comm", "other")
#: A GPU step whose window exceeds its busy time by this factor waits on the host (launch-bound).
HOST_BOUND_RATIO = 1.25
#: How many kernels or ops by time a breakdown lists.
TOP_KERNELS = 10
#: Above this share of the busy time in `other`, the record warns that the backend's table falls behind.
OTHER_WARN = 0.10
#: The fewest calls of the step profiled after the timed blocks (one more runs first, unprofiled, as the
#: profiler's warm-up). A run profiles one of its timed blocks' worth of calls where that is more, so that the
#: window's edges (the profiler starting, the last synchronisation) weigh in it as little as in a timed block.
PROFILED_STEPS = 5
#: ... and at most this many, so that a block of a microsecond step keeps the trace small.
MAX_PROFILED_CALLS = 2000
#: A profiled step longer than the timed one by more than this (percent) was slowed by the profiler itself (its
#: per-launch work on the host): the record says so, and its launch-bound reading comes from the timed step.
PERTURBED_PCT = 5.0


def profiled_calls(steps_per_block: int | None) -> int:
    """How many calls of the step a run profiles: a timed block's worth, within PROFILED_STEPS..MAX_PROFILED_CALLS."""
    return max(PROFILED_STEPS, min(int(steps_per_block or 0), MAX_PROFILED_CALLS))


#: Fused attention, whoever ships it: FlashAttention (`pytorch_flash::flash_fwd_kernel`, FA3/FA4's `flash_fwd_sm90`),
#: the memory-efficient CUTLASS kernels (`fmha_cutlassF`), cuDNN's fused attention (`..._sdpa_..._flash_fprop_...`),
#: and the ops that call them (`aten::scaled_dot_product_attention`, its CPU flash op). Every backend's table puts it
#: first: these names also say `fprop`, `cutlass` or `gemm`, which would make them a convolution or a matmul.
#: An explicit softmax(QK^T)V is no attention kernel: it shows as matmul, reduce and elementwise.
ATTENTION_RULE = ("attention", r"flash_?(fwd|bwd|attn|attention)|fmha|sdpa|efficient_attention|"
                              r"scaled_dot_product|dot_product_attention|flashattention|fused_?attention")

#: The NVIDIA libraries' kernel names, which no framework owns (cuDNN, cuBLAS, CUTLASS, NCCL, the CUDA
#: runtime's copies): a backend's table puts its own framework's names first and ends with these. Order
#: matters: cuDNN's batch-norm kernels name a layout (`bn_fw_tr_1C11_kernel_NCHW`), its convolutions a GEMM
#: (`sm90_xmma_fprop_implicit_gemm`), and a convolution's kernel a layout (`..._nhwckrsc_nhwc`).
GPU_LIBRARY_RULES: list[tuple[str, str]] = [
    ("comm", r"nccl|all_?reduce|all_?gather|reduce_?scatter|sendrecv"),
    ("copy", r"memcpy|memset|\bdtod\b|\bhtod\b|\bdtoh\b"),
    ("norm", r"\bbn_(fw|bw)|bn_fwd|bn_bwd|batch_?norm|layer_?norm|welford|cudnn::bn_"),
    ("conv", r"fprop|dgrad|wgrad|implicit_?gemm|implicit_convolve|winograd|conv2d|convolve|conv_|_conv|"
             r"scudnn|\d{3,5}cudnn|explicit_convolve|im2col|convolution"),
    ("matmul", r"gemm|cublas|cutlass|nvjet|s16816|s1688|h16816|xmma|\bmma\b|matmul"),
    ("layout", r"nchwtonhwc|nhwctonchw|nchw2nhwc|nhwc2nchw|transpose|permute|swizzle|converttensor"),
    ("other", r"redzone"),  # autotuning's buffer checks (TensorFlow, XLA): neither compute nor a copy
    ("reduce", r"reduc|softmax|pool"),
    ("elementwise", r"elementwise|eigenmetakernel|vectorized|unrolled|pointwise|apply_|scale|fill"),
]


@dataclass(frozen=True)
class Span:
    """One kernel (or CPU op) on the profiler's timeline: its name, start and end in seconds, its lane
    (stream or thread)."""

    name: str
    start_s: float
    end_s: float
    lane: str = ""


class Rules:
    """A backend's table of classes: ordered (class, regular expression) pairs, the first match wins,
    matched case-insensitively anywhere in the name; a name no rule matches is `other`."""

    def __init__(self, table: list[tuple[str, str]]):
        unknown = sorted({cls for cls, _ in table} - set(CLASSES))
        if unknown:
            raise ValueError(f"unknown breakdown classes {unknown}; expected one of {', '.join(CLASSES)}")
        self.table = [(cls, re.compile(pattern, re.IGNORECASE)) for cls, pattern in table]

    def classify(self, name: str) -> str:
        """The class of a kernel or op name."""
        for cls, pattern in self.table:
            if pattern.search(name):
                return cls
        return "other"


@dataclass
class Capture:
    """What a backend's profiler saw of `steps` steps."""

    #: the profiler and what it recorded, in words (`torch.profiler: CUDA kernels`)
    source: str
    #: `gpu` (device kernels) or `cpu` (the framework's ops on the host's threads)
    activity: str
    spans: list[Span]
    #: (start, end) of the profiled steps, seconds on the spans' clock, the device waited for at the end
    window: tuple[float, float]
    steps: int
    rules: Rules
    #: where the framework's raw trace was written, if it was kept
    trace: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TraceProfiler:
    """A framework's profiler set up for one capture: what differs between torch.profiler, jax.profiler and
    TensorFlow's, each of which writes a trace file of the profiled steps and reads the spans back from it."""

    #: the profiler's name, in messages (`torch.profiler`)
    name: str
    #: the capture's source: the profiler and what its spans are, in words
    source: str
    #: `gpu` (device kernels) or `cpu` (the framework's ops on the host's threads)
    activity: str
    rules: Rules
    #: (step, sync, steps, folder): run `steps` calls of the step under the profiler inside the WINDOW annotation,
    #: the device waited for (sync) before the annotation closes, the trace written under folder; (the trace
    #: file, notes on the recording for the record)
    record: Callable[[Callable[[], Any], Callable[[], None], int, str], tuple[str, list[str]]]
    #: the spans of a trace file the breakdown counts, and the window annotation's (start, end) in seconds;
    #: ValueError where the trace has no window
    read: Callable[[str], tuple[list[Span], tuple[float, float]]]


def capture_trace(profiler: TraceProfiler, step: Callable[[], Any], sync: Callable[[], None], steps: int,
                  trace_dir: str | None) -> Capture:
    """One step unprofiled (the profiler's warm-up), then `steps` under the profiler; the breakdown's capture.
    The trace is kept in `trace_dir` where given, else written in a scratch folder removed here. Raises where
    the profiler cannot run or saw nothing."""
    step()
    sync()
    if trace_dir:
        os.makedirs(trace_dir, exist_ok=True)
    scratch = None if trace_dir else tempfile.TemporaryDirectory(prefix="harness-profile-")
    try:
        path, notes = profiler.record(step, sync, steps, trace_dir or scratch.name)
        spans, window = profiler.read(path)
    finally:
        if scratch is not None:
            scratch.cleanup()
    if not spans:
        raise RuntimeError(f"{profiler.name} saw nothing in the profiled steps ({profiler.source})"
                           + ("; is CUPTI missing?" if profiler.activity == "gpu" else ""))
    return Capture(source=profiler.source, activity=profiler.activity, spans=spans, window=window, steps=steps,
                   rules=profiler.rules, trace=None if scratch is not None else path, notes=list(notes))


def covered_shares(spans: list[Span], window: tuple[float, float]) -> list[float]:
    """Each span's share of the window's covered time: every instant inside the window that several spans
    cover is split equally among them, so the shares add up to the covered time exactly."""
    low, high = window
    points = []
    for i, span in enumerate(spans):
        start, end = max(span.start_s, low), min(span.end_s, high)
        if end > start:
            points += [(start, 1, i), (end, -1, i)]
    points.sort(key=lambda p: (p[0], p[1]))  # ends before starts at the same instant
    shares = [0.0] * len(spans)
    active: set[int] = set()
    last = low
    for t, kind, i in points:
        if active and t > last:
            each = (t - last) / len(active)
            for j in active:
                shares[j] += each
        last = t
        if kind > 0:
            active.add(i)
        else:
            active.discard(i)
    return shares


def _top(spans: list[Span], classes: list[str], steps: int) -> list[dict]:
    """The kernels (ops) with the most own time: name, class, count and milliseconds per step."""
    by_name: dict[str, list] = {}
    for span, cls in zip(spans, classes):
        entry = by_name.setdefault(span.name, [cls, 0, 0.0])
        entry[1] += 1
        entry[2] += span.end_s - span.start_s
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][2])[:TOP_KERNELS]
    return [{"name": name[:200], "class": cls, "count_per_step": count / steps, "ms_per_step": 1e3 * total / steps}
            for name, (cls, count, total) in ranked]


def breakdown(capture: Capture, timed_step_s: float | None) -> dict[str, Any]:
    """The record's `profile` of a capture: per step, seconds in each class and `idle`, the busy and
    overlapping time, the unclassified share, the top kernels, and how the window's step compares with
    the timed `step_time_s` of the same record."""
    steps = max(int(capture.steps), 1)
    low, high = capture.window
    inside = [s for s in capture.spans if s.end_s > low and s.start_s < high]
    classes = [capture.rules.classify(s.name) for s in inside]
    shares = covered_shares(inside, capture.window)
    per_class = dict.fromkeys(CLASSES, 0.0)
    for cls, share in zip(classes, shares):
        per_class[cls] += share / steps
    busy = sum(per_class.values())
    step = (high - low) / steps
    own = sum(min(s.end_s, high) - max(s.start_s, low) for s in inside) / steps
    out: dict[str, Any] = {
        "source": capture.source, "activity": capture.activity, "steps": steps,
        "step_s": step, "classes_s": per_class, "idle_s": max(step - busy, 0.0), "busy_s": busy,
        "overlap_s": max(own - busy, 0.0), "other_share": per_class["other"] / busy if busy > 0 else None,
        "spans_per_step": len(inside) / steps,
        "timed_step_s": timed_step_s,
        "vs_timed_pct": 100.0 * (step / timed_step_s - 1.0) if timed_step_s else None,
        "top": _top(inside, classes, steps), "trace": capture.trace,
    }
    if capture.activity == "gpu":
        # Whether the timed step waits on the host. The kernels run as long under the profiler as without it;
        # the host does not (the profiler does work of its own at every launch). So where the profiled step
        # is the timed one (within PERTURBED_PCT), the timeline's idle answers; where the profiler slowed it,
        # the timed step less the kernels' busy time does, and `idle_basis` says which.
        perturbed = bool(timed_step_s and out["vs_timed_pct"] > PERTURBED_PCT)
        basis = timed_step_s if perturbed else step
        out.update(host_bound=bool(basis > HOST_BOUND_RATIO * busy),
                   gpu_idle_fraction=max(basis - busy, 0.0) / basis if basis else None,
                   idle_basis="timed step less busy" if perturbed else "timeline", perturbed=perturbed)
    if capture.notes:
        out["notes"] = list(capture.notes)
    return out


class BreakdownVerdict(BaseModel):
    """What a breakdown (the record's `profile`) says about the step, typed where its warnings read it: whether it
    waits on the host, whether the profiler slowed it, how much of it no rule classified, and its top kernels."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    host_bound: bool = False
    gpu_idle_fraction: float | None = None
    perturbed: bool = False
    vs_timed_pct: float | None = None
    other_share: float | None = None
    top: list[dict[str, Any]] = []

    def launch_bound_warning(self) -> str | None:
        """The record's warning for a GPU step that waits on the host; None otherwise."""
        if not self.host_bound or self.gpu_idle_fraction is None:
            return None
        return (f"launch-bound: the GPU is idle {100 * self.gpu_idle_fraction:.0f}% of the step waiting "
                "for the host (a whole-step graph or a compiler launches fewer kernels)")

    def perturbed_warning(self) -> str | None:
        """The record's warning where the profiler slowed the profiled step beyond PERTURBED_PCT; None otherwise."""
        if not self.perturbed:
            return None
        return (f"profile: the profiled step is {self.vs_timed_pct:.0f}% longer than the timed one (the profiler's "
                "own work at each launch slowed the host): its idle is the profiler's, its kernel classes stand")

    def unclassified_warning(self) -> str | None:
        """A warning where more than OTHER_WARN of the busy time is `other`, naming the largest such kernels, so
        that a backend's table that has fallen behind its framework shows; None otherwise."""
        share = self.other_share
        if share is None or share <= OTHER_WARN:
            return None
        names = [k["name"][:60] for k in self.top if k["class"] == "other"][:3]
        return (f"profile: {100 * share:.0f}% of the busy time matched no rule of the backend's table (other)"
                + (f", e.g. {'; '.join(names)}" if names else ""))

    def warnings(self) -> list[str]:
        """Every warning the breakdown gives, for the record."""
        found = (self.launch_bound_warning(), self.perturbed_warning(), self.unclassified_warning())
        return [w for w in found if w]


def profile_run(capture_steps: Callable[[int, str | None], Capture], timed_step_s: float | None,
                trace_dir: str | None, warnings: list[str], calls: int = PROFILED_STEPS) -> dict[str, Any]:
    """Profile a run after its timed blocks: `capture_steps(steps, trace_dir)` is the device's profiler
    hook (`trace_dir`: where the raw trace is kept, measure.profile_trace_dir; None: not kept). The breakdown, or `{"error": why}` where the profiler failed: a profiler never fails the run,
    and the record keeps its timings."""
    started = time.perf_counter()
    try:
        capture = capture_steps(calls, trace_dir)
        out = breakdown(capture, timed_step_s)
    except Exception as exc:  # noqa: BLE001 - a profiler's failure (no CUPTI, say) is reported, never fatal
        text = f"{type(exc).__name__}: {exc}".strip()[:500]
        warnings.append(f"no profile breakdown: {text}")
        return {"error": text}
    out["profile_s"] = time.perf_counter() - started
    warnings.extend(BreakdownVerdict.model_validate(out).warnings())
    return out
