"""Capacity: the largest batch_size that trains without running out of memory.

Doubling from `start` until a probe runs out of memory (or `limit` is reached), then bisection
between the last batch that fit and the first that did not, each probe in its own worker process
so an out-of-memory never leaks into the next probe. One result record per configuration, with
metric `max_batch_size`; every probe is stored too (marked `probe_of`), so nothing measured is lost.

A probe is cheap: the first step and one more, no warm-up, no telemetry, no launch probe, and no
autotuning sweep (measure.probe tells the backend: cuDNN benchmark mode off, XLA autotuning off; TensorFlow
keeps its cuDNN autotuning, without which it cannot fall back from an algorithm whose scratch does not fit).
A backend whose GPU kernels fail past a tensor size (`gpu_max_tensor_elements`) bounds the memory model's guess.
Its timeout follows the batch: the last fitting probe's time, scaled by the batch ratio, with room.
A probe that times out is tried once more with twice the time; a second timeout counts as "does not
fit" and the record says so. Near the memory limit cuDNN and cuBLAS may report an allocation they
could not make as INTERNAL_ERROR or NOT_SUPPORTED: after a smaller batch has fit, such a failure
counts as out of memory, with the error's first line kept as the evidence.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field, replace

from harness.errors import line_naming
from harness.machine.devices import gpu_index
from harness.results.record import Result, utc_now
from harness.seam.backend import available_backends
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.plan import RunSpec, new_id, run_key
from harness.session.runner import Runner, SessionOutcome
from harness.workloads import WORKLOADS

#: A probe runs the first step and one timed step: enough for the optimizer state and the
#: allocator's peak to appear (the second step is the first with momentum buffers), cheap enough to
#: repeat a dozen times. `probe` tells the worker to skip telemetry, the launch probe and autotuning.
PROBE_MEASURE = {"warmup": 0, "steps": 1, "repeats": 1, "processes": 1, "min_time_s": None, "max_repeats": None,
                 "target_ci_pct": None, "probe": True}
#: Seconds a probe gets beyond its scaled estimate (process start, imports, a compile that does not scale).
PROBE_SLACK_S = 60.0
#: Library errors that near the memory limit mean an allocation failed (after a smaller batch fit).
EDGE_ERRORS = ("CUDNN_STATUS_INTERNAL_ERROR", "CUDNN_STATUS_NOT_SUPPORTED", "CUDNN_STATUS_EXECUTION_FAILED",
               "CUBLAS_STATUS_INTERNAL_ERROR", "CUBLAS_STATUS_NOT_SUPPORTED", "CUBLAS_STATUS_EXECUTION_FAILED")


#: Kernel failures that, after a smaller batch fit, mean the batch is too large for a kernel rather than for
#: the memory: TensorFlow's GPU kernels index many tensors with 32-bit integers, and past 2**31 elements
#: (ResNet-50's stem activation at about 2,700 images) some fail with an illegal address instead of an error.
SIZE_ERRORS = ("CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered")


#: How a worker dies when a library does not check an allocation that failed: under --memory-limit, after a
#: smaller batch fit, these are counted as out of memory (torch 2.0.1 died by SIGSEGV so on the CPU).
UNCHECKED_ALLOCATION_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS")


def fits(record: Result, smaller_fit: bool = False, host_limit: bool = False) -> bool | None:
    """True if a probe trained, False if it ran out of memory, None if it failed otherwise.

    A worker killed by SIGKILL on the CPU is counted as out of memory: that is what the OS
    out-of-memory killer sends. After a smaller batch fit, a cuDNN/cuBLAS internal or
    not-supported error is too (EDGE_ERRORS), and a kernel that fails with an illegal address at a size
    (SIZE_ERRORS), which is no memory failure and is said to be none (`limited_by: kernel`, kept in the
    record's extra); under a host memory limit (`host_limit`: --memory-limit), so is a worker killed by
    SIGSEGV, SIGABRT or SIGBUS before its result. A probe that timed out twice counts as not fitting.
    Each such call is noted in the probe record's warnings.
    """
    status = record.status
    if status == "ok":
        return True
    if status == "oom" or record.note("timed_out_twice"):
        return False
    error = str(record.error)
    if status == "failed" and "SIGKILL" in error:
        return False
    if status == "failed" and smaller_fit and host_limit and "before writing a result" in error:
        hit = next((f"signal {sig}" for sig in UNCHECKED_ALLOCATION_SIGNALS if f"signal {sig}" in error), None)
        if hit:
            record.warnings.append(
                f"counted as out of memory: the worker was killed by {hit} under --memory-limit after a smaller batch "
                "fit (a library that does not check an allocation that failed)")
            return False
    if status == "failed" and smaller_fit:
        return _at_the_edge(record, error)
    return None


def _at_the_edge(record: Result, error: str) -> bool | None:
    """False for a failure that, after a smaller batch fit, means the batch is too large (noted in the
    record's warnings); None for any other failure."""
    hit = next((e for e in EDGE_ERRORS if e in error), None)
    if hit:
        record.warnings.append(
            f"counted as out of memory: {hit} after a smaller batch fit (cuDNN/cuBLAS report allocation "
            "failures at the memory limit this way)")
        return False
    hit = next((e for e in SIZE_ERRORS if e in error), None)
    if hit:
        record.warnings.append(
            f"counted as not fitting, though not for memory: {hit} after a smaller batch fit (a kernel that "
            "fails past a tensor size, such as 32-bit indexing past 2**31 elements)")
        record.set_note("limited_by", "kernel")
        return False
    return None


def probe_timeout(n: int, fitted: list[tuple[int, float]], ceiling: float) -> float:
    """Seconds to give a probe of batch n: the largest fitting probe's time scaled by n over its batch,
    twice over, plus slack; at most `ceiling` (the scenario's timeout); `ceiling` before any probe fit."""
    if not fitted:
        return ceiling
    batch, seconds = max(fitted)
    return min(ceiling, 2.0 * seconds * max(1.0, n / batch) + PROBE_SLACK_S)


def tolerance(lo: int, resolution: int | str) -> int:
    """The widest bracket [lo, hi] that settles the search: `resolution` images, or its share of lo."""
    if isinstance(resolution, str):
        return max(1, int(lo * float(resolution[:-1]) / 100))
    return max(1, resolution)


#: Where the memory model sends the search: just under its predicted limit, then just over it. A
#: guess under the limit that fails is followed by steps of 10% down until one fits, then bisection.
GUESS_UNDER, GUESS_OVER, GUESS_STEP = 0.97, 1.03, 0.90


def memory_model(fitted: list[tuple[int, int]], device_bytes: int | None, reserve_bytes: int = 1 << 30):
    """The largest batch the memory seems to allow, from the two largest fitting probes' peaks: peak(n) =
    a + b*n through them, solved for the device's memory less `reserve_bytes` (the context, the
    allocator's slack). None without two distinct fits with peaks, a growing peak, or a known device size."""
    points = sorted({n: peak for n, peak in fitted if peak}.items())
    if device_bytes is None or len(points) < 2:
        return None
    (n1, p1), (n2, p2) = points[-2], points[-1]
    slope = (p2 - p1) / (n2 - n1)
    if slope <= 0:
        return None
    return int(n2 + (device_bytes - reserve_bytes - p2) / slope)


def search(probe, start: int = 1, limit: int = 65536, resolution: int | str = 1,
           predict=None, bound: int | None = None) -> tuple[int, int | None, list, str | None]:
    """Largest n in [start, limit] with probe(n) True, assuming monotonicity; 0 where start does not fit (no
    batch below the start is tried: it may be one the backend refuses, such as 1 with BatchNorm).

    Returns (largest fitting, smallest failing or None, [(n, outcome)], error). `probe` returns
    True, False, or None (an error that is not out of memory, which stops the search).
    Doubling from `start`; once `predict()` (a memory model of the fits so far) names a limit
    above the last fit, the search jumps to just under it and then just over it, so that a
    bracket a few percent wide comes from about four probes instead of a doubling ladder.
    Bisection stops when the bracket is at most `resolution` wide (see `tolerance`).
    `bound`: the first batch known to fail for a reason other than memory (a kernel's tensor-size limit); a
    guess past it goes to the batch just under it and then to it, which settles the answer in two probes.
    """
    history = []

    def check(n):
        outcome = probe(n)
        history.append((n, outcome))
        return outcome

    def stop(n):
        return lo, hi, history, f"probe at batch_size={n} failed for a reason other than memory"

    lo, hi, failed = _climb(check, max(1, start), limit, predict, bound)
    if failed is not None:
        return stop(failed)
    if hi is None or lo == 0:  # nothing fits at the start: the search never goes below it
        return lo, hi, history, None
    while hi - lo > tolerance(lo, resolution):
        mid = (lo + hi) // 2
        ok = check(mid)
        if ok is None:
            return stop(mid)
        if ok:
            lo = mid
        else:
            hi = mid
    return lo, hi, history, None


def _climb(check, n: int, limit: int, predict, bound: int | None) -> tuple[int, int | None, int | None]:
    """The search up to its first bracket: (largest fitting, smallest failing or None at the limit, the batch
    whose probe failed for a reason other than memory or None). Doubling, the memory model's guesses and
    the tensor-size bound as `search` describes."""
    lo, hi = 0, None
    predicted = False  # the memory model has named a limit (it is followed once)
    descending = False  # n is the model's guess under its limit, or a step below a guess that failed
    over = None  # the model's guess just over its limit, to try once its guess under it fits
    while True:
        ok = check(n)
        if ok is None:
            return lo, hi, n
        if not ok:
            hi = n if hi is None else min(hi, n)
            if descending and int(n * GUESS_STEP) > lo:  # the model was optimistic: step down from its guess
                n = int(n * GUESS_STEP)
                continue
            return lo, hi, None
        lo = n
        if hi is not None:  # a step below a failed guess fit: bisect between them
            return lo, hi, None
        if n >= limit:
            return lo, None, None
        descending = False
        estimate = None if predicted or predict is None else predict()
        if estimate is not None:  # asked after each fit until the model has what it needs, then once
            predicted = True
            if bound is not None and n < bound - 1 <= int(estimate * GUESS_UNDER) and bound <= limit:
                n, over, descending = bound - 1, bound, True
                continue
            if int(estimate * GUESS_UNDER) > n:
                n, over, descending = min(limit, int(estimate * GUESS_UNDER)), int(estimate * GUESS_OVER) + 1, True
                continue
        if over is not None and over > n:
            n, over = min(limit, over), None
            continue
        # past the model's guesses (it was pessimistic): climb in steps of 10%, not doubling, which
        # overshoots by up to 2x and costs probes as large as the GPU allows; before the model: double
        n = min(int(n / GUESS_STEP) + 1 if predicted else n * 2, limit)
        if bound is not None and lo < bound - 1 < n:  # up to the batch just under the tensor-size bound
            n = bound - 1
        elif bound is not None and lo == bound - 1:  # then once past it
            n = min(bound, limit)


def capacity_key(spec: RunSpec) -> str:
    """The run_key of a configuration's capacity record: its spec's, with batch_size left open."""
    return run_key(spec.scenario, spec.workload, spec.backend, spec.device, {**spec.params, "batch_size": None})


def find_max_batch(runner: Runner, plan: list[RunSpec], start: int = 1, limit: int = 65536, resolution: int = 1) -> SessionOutcome:
    """Search the largest batch_size for every distinct configuration of the plan; store everything."""
    outcome = SessionOutcome()
    configs: dict[str, RunSpec] = {}
    for spec in plan:
        configs.setdefault(capacity_key(spec), spec)
    ahead = getattr(runner, "workers_ahead", None)  # each probe's worker started while the previous probe runs
    with trap_signals():
        try:
            with ahead() if ahead is not None else contextlib.nullcontext():
                for i, (key, spec) in enumerate(configs.items(), 1):
                    runner.on_start(i, len(configs), replace(spec, params={**spec.params, "batch_size": "?"}))
                    record = _search_one(runner, key, spec, _Bounds(start, limit, resolution))
                    runner.store.add(record)
                    outcome.records.append(record)
                    runner.on_result(i, len(configs), record)
        except (Interrupted, KeyboardInterrupt) as exc:
            outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
    return outcome


@dataclass(frozen=True)
class _Bounds:
    """Where a search starts, the largest batch it tries, and how narrow its answer's bracket must be."""

    start: int
    limit: int
    resolution: int | str


@dataclass
class _Probes:
    """One configuration's probes so far: each probe runs in its own worker and is stored as it ends."""

    runner: Runner
    base: RunSpec
    capacity_id: str
    probes: list[Result] = field(default_factory=list)
    fitted: list[tuple[int, float]] = field(default_factory=list)  # (batch, seconds) of the fitting probes
    peaks: list[tuple[int, int | None]] = field(default_factory=list)  # (batch, allocator peak) of the fitting probes
    device_bytes: list[int | None] = field(default_factory=list)  # the device's memory, as each fitting probe saw it
    estimates: list[int] = field(default_factory=list)  # the memory model's limits; the search followed the first

    def probe(self, n: int) -> bool | None:
        """Whether batch n fits (None: failed otherwise); a probe that times out is tried once more with twice the time."""
        timeout = probe_timeout(n, self.fitted, float(self.base.measure.get("timeout_s") or 1800))
        record = self._once(n, timeout)
        if record.status == "timeout":  # neither fits nor fails: once more, with twice the time
            record = record.updated(warnings=[*(record.warnings or []), f"timed out after {timeout:.0f} s; tried again"])
            self.runner.store.add(record)
            record = self._once(n, 2 * timeout)
            if record.status == "timeout":
                record = record.merged({"timed_out_twice": True, "warnings": [*(record.warnings or []), (
                    f"timed out twice ({timeout:.0f} s, then {2 * timeout:.0f} s): counted as not fitting")]})
        answer = fits(record, smaller_fit=bool(self.fitted),
                      host_limit=bool(getattr(self.runner, "memory_limit_bytes", None)))
        self.runner.on_progress(self.base.with_params(batch_size=n), {
            "phase": "probe_done", "fits": answer, "status": record.status, "seconds": record.duration_s,
            "phases_s": record.phases_s or {}, "peak_allocated_bytes": record.peak_allocated_bytes})
        if answer:
            self.fitted.append((n, float(record.duration_s or 0.0)))
            self.peaks.append((n, record.peak_allocated_bytes))
            self.device_bytes.append(record.gpu_size()["memory_bytes"])
        self.probes.append(record)
        self.runner.store.add(record)
        return answer

    def predict(self) -> int | None:
        """The memory model's limit from the fitting probes so far (None until it has what it needs)."""
        estimate = memory_model(self.peaks, self.device_bytes[-1] if self.device_bytes else None)
        if estimate is not None:
            self.estimates.append(estimate)
        return estimate

    def _once(self, n: int, timeout_s: float) -> Result:
        """One probe of batch n in its own worker, bounded by timeout_s; its record (not yet stored)."""
        probe_spec = self.base.with_params(batch_size=n)
        probe_spec = replace(probe_spec, measure={**probe_spec.measure, "timeout_s": timeout_s})
        record = self.runner.execute(probe_spec)
        return record.as_probe_of(self.capacity_id)


def _search_one(runner: Runner, key: str, spec: RunSpec, bounds: _Bounds) -> Result:
    """One configuration's search: every probe stored as it ends; its capacity record returned (not stored)."""
    base = replace(spec, measure={**spec.measure, **PROBE_MEASURE})
    capacity_id = new_id()
    started, clock = utc_now(), time.perf_counter()
    static = runner.static_status(base)
    record = Result.planned(replace(spec, run_id=capacity_id, run_key=key)).updated(
        started_at=started, metric="max_batch_size", unit="images")
    if static is not None:
        return record.updated(status=static[0], error=static[1])
    probes = _Probes(runner, base, capacity_id)
    bound = _kernel_bound(spec)
    best, first_bad, _, error = search(probes.probe, bounds.start, bounds.limit, bounds.resolution,
                                       probes.predict, bound)
    return _capacity_record(record, spec, probes, _Answer(best, first_bad, error, bound, time.perf_counter() - clock),
                            bounds)


@dataclass(frozen=True)
class _Answer:
    """What a search found: the largest fitting batch, the smallest failing one, why it stopped early, the
    backend's tensor-size bound, and the seconds it took."""

    best: int
    first_bad: int | None
    error: str | None
    bound: int | None
    seconds: float


def _capacity_record(record: Result, spec: RunSpec, probes: _Probes, answer: _Answer, bounds: _Bounds) -> Result:
    """The capacity record of a search: its answer, the largest fitting probe's figures, and how it was found."""
    best, start = answer.best, bounds.start
    last = next((p for p in reversed(probes.probes) if p.status == "ok"), None)
    failing = next((p for p in reversed(probes.probes) if p.params.get("batch_size") == answer.first_bad), None)
    first = last or (probes.probes[0] if probes.probes else None)
    record = record.updated(
        status="ok" if answer.error is None and best > 0 else "failed",
        error=answer.error if answer.error else (None if best > 0 else _nothing_fits(start, probes)),
        median=float(best) if best else None,
        samples=[float(best)] if best else [],
        params={**spec.params, "batch_size": best or None},
        device=first.device if first is not None else spec.device,
        device_name=first.device_name if first is not None else None,
        framework_version=first.framework_version if first is not None else None,
        api=(last.api if last is not None else None) or {},
        **{name: getattr(last, name) if last is not None else None
           for name in ("peak_allocated_bytes", "device_used_bytes", "host_peak_rss_bytes")},
        env=(first.env if first is not None else None) or {},
        checks=_search_checks(probes, failing, answer, bounds),
        duration_s=answer.seconds,
        warnings=sorted({w for p in probes.probes for w in (p.warnings or [])
                         if w.startswith(("counted as", "timed out"))}),
    )
    _note_past_int32(record, spec, answer)
    if failing is not None and failing.status == "failed" and "SIGKILL" in str(failing.error):
        record.warnings.append("a probe killed by SIGKILL was counted as out of memory (the OS OOM killer)")
    return record


def _nothing_fits(start: int, probes: _Probes) -> str:
    """Why a search that found no fitting batch ended: its start does not fit, and it searches nothing below."""
    first = probes.probes[0] if probes.probes else None
    how = f" ({first.status}: {str(first.error or '').splitlines()[0][:200]})" if first is not None and first.error else ""
    return (f"nothing fits at the start: batch_size={start} does not fit{how}; the search does not go below its "
            "start (give a smaller --capacity-start or capacity.start)")


def _search_checks(probes: _Probes, failing: Result | None, answer: _Answer, bounds: _Bounds) -> dict:
    """The capacity record's `checks`: every probe, the failure that bounded the answer, and how it was searched."""
    best, first_bad, bound = answer.best, answer.first_bad, answer.bound
    return {
        "probes": [[p.params.get("batch_size"), p.status] for p in probes.probes],
        "first_failing_batch_size": first_bad,
        "failure": failing.error if failing is not None else None,
        "failure_evidence": ((failing.note("oom_evidence") or _evidence(failing.error))
                             if failing is not None else None),
        "limited_by": _limited_by(failing, first_bad, best, bounds.limit, bound),
        "search": (f"doubling from {bounds.start} (jumping to the memory model's limit once two probes fit"
                   + (f", at most to {bound - 1}, the largest batch within the backend's tensor-size bound"
                      if bound else "")
                   + f"), then bisection to within {bounds.resolution}; limit {bounds.limit}"),
        "kernel_bound_batch": bound,
        "within_pct": (100.0 * (first_bad - 1 - best) / best) if best and first_bad else None,
        "predicted_limit": probes.estimates[0] if probes.estimates else None,
        "reached_limit": first_bad is None and best >= bounds.limit,
        "search_s": answer.seconds,
        "probe_seconds": [p.duration_s for p in probes.probes],
    }


def _note_past_int32(record: Result, spec: RunSpec, answer: _Answer) -> None:
    """checks.batch_past_2_31_elements, and a warning where that batch may be what bounded a memory answer."""
    past = _past_int32(spec)
    record.checks["batch_past_2_31_elements"] = past
    first_bad = answer.first_bad
    if past and first_bad and answer.best < past <= first_bad and record.checks["limited_by"] == "memory":
        record.warnings.append(
            f"the first batch that did not fit ({first_bad}) holds a tensor of more than 2**31 elements (from "
            f"{past} images up): a kernel's 32-bit indexing, not memory, may be what bounds this answer")


def _kernel_bound(spec: RunSpec) -> int | None:
    """The first batch whose largest tensor passes the backend's GPU kernels' element bound (None: no bound
    declared, a device other than `cuda:N`, or a workload that does not say its tensor sizes)."""

    backend = available_backends().get(spec.backend)
    elements = getattr(backend, "gpu_max_tensor_elements", None)
    if not elements or gpu_index(str(spec.device)) is None:
        return None
    return _past_elements(spec, elements)


def _past_int32(spec: RunSpec) -> int | None:
    """The smallest batch whose largest tensor has more than 2**31 - 1 elements (None where not known)."""
    return _past_elements(spec, 2**31 - 1)


def _past_elements(spec: RunSpec, elements: int) -> int | None:
    """The smallest batch whose largest tensor has more than `elements` elements (None where not known)."""

    workload = WORKLOADS.get(spec.workload)
    if workload is None:
        return None
    try:
        per_item = workload.largest_tensor_per_item(workload.validate({**spec.params, "batch_size": 1}))
    except Exception:  # noqa: BLE001 - a note, never a reason to lose the record
        return None
    return elements // per_item + 1 if per_item else None


def _evidence(error) -> str | None:
    """The line of an error that names its cause (a known memory or kernel message), else its first line."""
    if not error:
        return None
    return line_naming(error, EDGE_ERRORS + SIZE_ERRORS + ("failed to allocate", "out of memory", "OOM when allocating"))


def _limited_by(failing: Result | None, first_bad: int | None, best: int, limit: int, bound: int | None = None) -> str | None:
    """What bounded the answer: memory, a kernel's size limit, a probe's time, the search's limit. A batch
    that fails one image past the backend's tensor-size bound, the batch under it having fit, is the kernel's
    bound whatever its error says (TensorFlow says ResourceExhaustedError there with tens of GiB free)."""
    if failing is None:
        return "limit" if first_bad is None and best >= limit else None
    if failing.note("limited_by"):
        return failing.note("limited_by")
    if bound is not None and first_bad == bound and best == bound - 1:
        return "kernel"
    return "time" if failing.note("timed_out_twice") else "memory"
