"""What a capacity search's probes and its answer mean: whether a probe's batch fits (out of memory, and the
failures that near the memory limit are counted as such), and the configuration's capacity record: the largest
batch that fit, the failure that bounded it, what bounded it (memory, a kernel's tensor-size limit, a probe's
time, the search's limit) and how it was searched."""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import line_naming
from harness.machine.devices import gpu_index
from harness.machine.env import Environment
from harness.results.parts import Checks
from harness.results.record import Result
from harness.seam.backend import available_backends
from harness.seam.runspec import RunSpec
from harness.session.capacity_search import Bounds
from harness.workloads import WORKLOADS

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
    """True if a probe trained, False if it ran out of memory, None if it failed otherwise (judge_probe's answer)."""
    return judge_probe(record, smaller_fit, host_limit)[0]


def judge_probe(record: Result, smaller_fit: bool = False, host_limit: bool = False) -> tuple[bool | None, Result]:
    """(whether the probe's batch fits, the probe's record with what the answer rests on in its warnings): True if
    it trained, False if it ran out of memory, None if it failed otherwise.

    A worker killed by SIGKILL on the CPU is counted as out of memory: that is what the OS
    out-of-memory killer sends. After a smaller batch fit, a cuDNN/cuBLAS internal or
    not-supported error is too (EDGE_ERRORS), and a kernel that fails with an illegal address at a size
    (SIZE_ERRORS), which is no memory failure and is said to be none (`limited_by: kernel`, a note of the
    record); under a host memory limit (`host_limit`: --memory-limit), so is a worker killed by
    SIGSEGV, SIGABRT or SIGBUS before its result. A probe that timed out twice counts as not fitting.
    Each such call is noted in the probe record's warnings.
    """
    status = record.status
    if status == "ok":
        return True, record
    if status == "oom" or record.note("timed_out_twice"):
        return False, record
    error = str(record.error)
    if status == "failed" and "SIGKILL" in error:
        return False, record
    if status == "failed" and smaller_fit and host_limit and "before writing a result" in error:
        hit = next((f"signal {sig}" for sig in UNCHECKED_ALLOCATION_SIGNALS if f"signal {sig}" in error), None)
        if hit:
            return False, record.with_warning(
                f"counted as out of memory: the worker was killed by {hit} under --memory-limit after a smaller batch "
                "fit (a library that does not check an allocation that failed)")
    if status == "failed" and smaller_fit:
        return _at_the_edge(record, error)
    return None, record


def _at_the_edge(record: Result, error: str) -> tuple[bool | None, Result]:
    """False for a failure that, after a smaller batch fit, means the batch is too large (noted in the
    record's warnings); None for any other failure."""
    hit = next((e for e in EDGE_ERRORS if e in error), None)
    if hit:
        return False, record.with_warning(
            f"counted as out of memory: {hit} after a smaller batch fit (cuDNN/cuBLAS report allocation "
            "failures at the memory limit this way)")
    hit = next((e for e in SIZE_ERRORS if e in error), None)
    if hit:
        return False, record.with_warning(
            f"counted as not fitting, though not for memory: {hit} after a smaller batch fit (a kernel that "
            "fails past a tensor size, such as 32-bit indexing past 2**31 elements)").with_note("limited_by", "kernel")
    return None, record


@dataclass(frozen=True)
class Answer:
    """What a search found: the largest fitting batch, the smallest failing one, why it stopped early, the
    backend's tensor-size bound, the seconds it took, and the memory model's predicted limit."""

    best: int
    first_bad: int | None
    error: str | None
    bound: int | None
    seconds: float
    #: the memory model's first predicted limit (the one the search followed), None where it named none
    predicted: int | None = None
    #: the steps each probe trained, its first step included
    steps: int | None = None


def capacity_record(record: Result, spec: RunSpec, probes: list[Result], answer: Answer, bounds: Bounds) -> Result:
    """The capacity record of a search: its answer, the largest fitting probe's figures, and how it was found."""
    best, start = answer.best, bounds.start
    last = next((p for p in reversed(probes) if p.status == "ok"), None)
    failing = next((p for p in reversed(probes) if _batch(p) == answer.first_bad), None)
    first = last or (probes[0] if probes else None)
    record = record.updated(
        status="ok" if answer.error is None and best > 0 else "failed",
        error=answer.error if answer.error else (None if best > 0 else _nothing_fits(start, probes)),
        median=float(best) if best else None,
        samples=[float(best)] if best else [],
        params={**spec.params, "batch_size": best or None},
        device=first.device if first is not None else spec.device,
        device_name=first.device_name if first is not None else None,
        framework_version=first.framework_version if first is not None else None,
        api=last.api if last is not None else {},
        **{name: getattr(last, name) if last is not None else None
           for name in ("peak_allocated_bytes", "device_used_bytes", "host_peak_rss_bytes")},
        env=first.env if first is not None else Environment(),
        checks=_search_checks(probes, failing, answer, bounds),
        duration_s=answer.seconds,
        warnings=sorted({w for p in probes for w in p.warnings if w.startswith(("counted as", "timed out"))}),
    )
    record = _note_past_int32(record, spec, answer)
    if failing is not None and failing.status == "failed" and "SIGKILL" in str(failing.error):
        record = record.with_warning("a probe killed by SIGKILL was counted as out of memory (the OS OOM killer)")
    return record


def _reserved(probe: Result | None) -> int | None:
    """The allocator's reserved peak of the probe that trained the answer (the worker's
    `checks.peak_reserved_bytes`); None where the framework keeps none (every framework on the CPU, TensorFlow,
    whose memory info has only the in-use peak)."""
    return probe.checks.peak_reserved_bytes if probe is not None else None


def _free(probe: Result | None, reserved: int | None) -> int | None:
    """The device's memory its allocator had not reserved at the answer: what a kernel's bound left unused
    (None where the device's size or the reserved peak is not known)."""
    memory = probe.gpu_size()["memory_bytes"] if probe is not None else None
    return memory - reserved if memory is not None and reserved is not None else None


def _batch(record: Result) -> int | None:
    """The batch size a probe ran."""
    return record.param("batch_size")


def _nothing_fits(start: int, probes: list[Result]) -> str:
    """Why a search that found no fitting batch ended: its start does not fit, and it searches nothing below."""
    first = probes[0] if probes else None
    how = f" ({first.status}: {str(first.error or '').splitlines()[0][:200]})" if first is not None and first.error else ""
    return (f"nothing fits at the start: batch_size={start} does not fit{how}; the search does not go below its "
            "start (give a smaller --capacity-start or capacity.start)")


def _search_checks(probes: list[Result], failing: Result | None, answer: Answer, bounds: Bounds) -> Checks:
    """The capacity record's `checks`: every probe, the failure that bounded the answer, and how it was searched."""
    best, first_bad, bound = answer.best, answer.first_bad, answer.bound
    best_probe = next((p for p in reversed(probes) if p.status == "ok" and _batch(p) == best), None)
    return Checks(
        probes=[[_batch(p), p.status] for p in probes],
        first_failing_batch_size=first_bad,
        failure=failing.error if failing is not None else None,
        failure_evidence=(failing.note("oom_evidence") or _evidence(failing.error)) if failing is not None else None,
        limited_by=(limited := _limited_by(failing, first_bad, best, bounds.limit, bound)),
        search=(f"doubling from {bounds.start} (jumping to the memory model's limit once two probes fit"
                + (f", at most to {bound - 1}, the largest batch within the backend's tensor-size bound"
                   if bound else "")
                + f"), then bisection to within {bounds.resolution}; limit {bounds.limit}"),
        kernel_bound_batch=bound,
        within_pct=(100.0 * (first_bad - 1 - best) / best) if best and first_bad else None,
        predicted_limit=answer.predicted,
        reached_limit=first_bad is None and best >= bounds.limit,
        search_s=answer.seconds,
        probe_seconds=[p.duration_s for p in probes],
        steps_trained=answer.steps,
        peak_reserved_bytes=(reserved := _reserved(best_probe)),
        memory_free_bytes=_free(best_probe, reserved) if limited == "kernel" else None,
    )


def _note_past_int32(record: Result, spec: RunSpec, answer: Answer) -> Result:
    """checks.batch_past_2_31_elements, and a warning where that batch may be what bounded a memory answer."""
    past = _past_int32(spec)
    record = record.updated(checks=record.checks.updated(batch_past_2_31_elements=past))
    first_bad = answer.first_bad
    if past and first_bad and answer.best < past <= first_bad and record.checks.limited_by == "memory":
        record = record.with_warning(
            f"the first batch that did not fit ({first_bad}) holds a tensor of more than 2**31 elements (from "
            f"{past} images up): a kernel's 32-bit indexing, not memory, may be what bounds this answer")
    return record


def kernel_bound(spec: RunSpec) -> int | None:
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
