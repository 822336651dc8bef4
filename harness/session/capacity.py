"""Capacity: the largest batch_size that trains without running out of memory.

Doubling from `start` until a probe runs out of memory (or `limit` is reached), then bisection
between the last batch that fit and the first that did not, each probe in its own worker process
so an out-of-memory never leaks into the next probe. One result record per configuration, with
metric `max_batch_size`; every probe is stored too (marked `probe_of`), so nothing measured is lost.

A probe trains PROBE_STEPS steps (the first step and the rest timed), no warm-up, no telemetry, no launch
probe, and no autotuning sweep (measure.probe tells the backend: cuDNN benchmark mode off, XLA autotuning off; TensorFlow
keeps its cuDNN autotuning, without which it cannot fall back from an algorithm whose scratch does not fit).
A backend whose GPU kernels fail past a tensor size (`gpu_max_tensor_elements`) bounds the memory model's guess.
Its timeout follows the batch: the last fitting probe's time, scaled by the batch ratio, with room.
A probe that times out is tried once more with twice the time; a second timeout counts as "does not
fit" and the record says so. Near the memory limit cuDNN and cuBLAS may report an allocation they
could not make as INTERNAL_ERROR or NOT_SUPPORTED: after a smaller batch has fit, such a failure
counts as out of memory, with the error's first line kept as the evidence.

Here, the search run probe by probe; where it probes next is capacity_search's, what a probe and the answer
mean capacity_answer's, and a scenario's search settings capacity_settings'.
"""

from __future__ import annotations

import contextlib
import signal
import time
from dataclasses import dataclass, field, replace

from harness.results.record import Result, utc_now
from harness.scenario.schema import CAPACITY_STEPS
from harness.session.capacity_answer import (
    Answer,
    capacity_record,
    judge_probe,
    kernel_bound,
)
from harness.session.capacity_search import Bounds, memory_model, probe_timeout, search
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.plan import RunSpec, new_id, run_key
from harness.session.runner import Runner, SessionOutcome

#: Steps a probe trains by default, its first included (a scenario's `capacity.steps`): the answer is a batch
#: that trained this many, not two, so that the allocator's fragmentation shows in the search.
PROBE_STEPS = CAPACITY_STEPS
#: A probe's measure settings besides its steps. Its spec says it is one (`RunSpec.probe`): its worker skips
#: telemetry, the launch probe and autotuning.
PROBE_MEASURE = {"warmup": 0, "repeats": 1, "processes": 1, "min_time_s": None, "max_repeats": None,
                 "target_ci_pct": None}


def probe_measure(steps: int) -> dict:
    """A probe's measure settings for `steps` trained steps (at least 2: the first, untimed, and one timed)."""
    if steps < 2:
        raise ValueError(f"a capacity probe trains at least 2 steps, not {steps}")
    return {**PROBE_MEASURE, "steps": steps - 1}


def capacity_key(spec: RunSpec) -> str:
    """The run_key of a configuration's capacity record: its spec's, with batch_size left open."""
    return run_key(spec.scenario, spec.workload, spec.backend, spec.device, {**spec.params, "batch_size": None})


def find_max_batch(runner: Runner, plan: list[RunSpec], start: int = 1, limit: int = 65536, resolution: int = 1,
                   steps: int = PROBE_STEPS) -> SessionOutcome:
    """Search the largest batch_size for every distinct configuration of the plan, each probe training `steps`
    steps; store everything."""
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
                    record = _search_one(runner, key, spec, Bounds(start, limit, resolution), steps)
                    runner.store.add(record)
                    outcome.records.append(record)
                    runner.on_result(i, len(configs), record)
        except (Interrupted, KeyboardInterrupt) as exc:
            outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
    return outcome


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
        timeout = probe_timeout(n, self.fitted, self.base.timeout_s)
        record = self._once(n, timeout)
        if record.status == "timeout":  # neither fits nor fails: once more, with twice the time
            record = record.with_warning(f"timed out after {timeout:.0f} s; tried again")
            self.runner.store.add(record)
            record = self._once(n, 2 * timeout)
            if record.status == "timeout":
                record = record.with_note("timed_out_twice", True).with_warning(
                    f"timed out twice ({timeout:.0f} s, then {2 * timeout:.0f} s): counted as not fitting")
        answer, record = judge_probe(record, smaller_fit=bool(self.fitted),
                                     host_limit=bool(getattr(self.runner, "memory_limit_bytes", None)))
        self.runner.on_progress(self.base.with_params(batch_size=n), {
            "phase": "probe_done", "fits": answer, "status": record.status, "seconds": record.duration_s,
            "phases_s": record.phases_s.to_dict(), "peak_allocated_bytes": record.peak_allocated_bytes})
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
        probe_spec = self.base.with_params(batch_size=n).with_measure(timeout_s=timeout_s)
        record = self.runner.execute(probe_spec)
        return record.as_probe_of(self.capacity_id)


def _search_one(runner: Runner, key: str, spec: RunSpec, bounds: Bounds, steps: int = PROBE_STEPS) -> Result:
    """One configuration's search: every probe stored as it ends; its capacity record returned (not stored)."""
    base = replace(spec.with_measure(**probe_measure(steps)), probe=True)
    capacity_id = new_id()
    started, clock = utc_now(), time.perf_counter()
    static = runner.static_status(base)
    record = Result.planned(replace(spec, run_id=capacity_id, run_key=key)).updated(
        started_at=started, metric="max_batch_size", unit="images")
    if static is not None:
        return record.updated(status=static[0], error=static[1])
    probes = _Probes(runner, base, capacity_id)
    bound = kernel_bound(spec)
    best, first_bad, _, error = search(probes.probe, bounds.start, bounds.limit, bounds.resolution,
                                       probes.predict, bound)
    answer = Answer(best, first_bad, error, bound, time.perf_counter() - clock,
                    probes.estimates[0] if probes.estimates else None, steps)
    return capacity_record(record, spec, probes.probes, answer, bounds)
