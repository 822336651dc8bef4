"""What to expect before a session starts: its time from earlier runs of the same configurations, and the
work of a GPU-sized session about to run on the CPU."""

from __future__ import annotations

from dataclasses import dataclass

from harness.machine import nvml
from harness.results.record import Result
from harness.timing import stats
from harness.timing.settings import AUTO
from harness.workloads import WORKLOADS

#: The CPU's rate assumed for the warning before a GPU-sized session runs on it, TFLOP/s (low, high).
CPU_TFLOPS = (0.1, 0.5)
#: Work (TFLOP) from which that warning is given: ten minutes at the low rate.
CPU_WARN_TFLOP = 60.0


@dataclass(frozen=True)
class Forecast:
    """A session's expected time and load, before it runs.

    `known_s`: the summed median duration of the runs whose configuration ran before in the store (None: none
    did), `known_runs` of `runs` such runs, from `earlier_runs` stored records; `cpu_work_tflop`: the work of a
    GPU-sized session about to run on the CPU (None unless it is at least CPU_WARN_TFLOP).
    """

    runs: int = 0
    known_s: float | None = None
    known_runs: int = 0
    earlier_runs: int = 0
    cpu_work_tflop: float | None = None


def session_work_tflop(plan) -> float:
    """The plan's work in TFLOP: each run's FLOPs per step x (first step + warm-up + timed steps; under `steps: auto`
    one step a block, as a step too slow for the CPU gets)."""
    total = 0.0
    for spec in plan:
        workload = WORKLOADS.get(spec.workload)
        if workload is None:
            continue
        try:
            flops = workload.flops_per_step(workload.validate(spec.params)) or 0.0
        except Exception:  # noqa: BLE001 - an estimate is never a reason to stop
            continue
        m = spec.measure
        # `steps: auto` on a CPU running a GPU-sized step (what this estimate warns of) comes to one step a block
        steps = 1 if m.steps == AUTO else m.steps
        total += float(flops) * (1 + m.warmup + steps * m.repeats)
    return total / 1e12


def _timed_run(r: Result) -> bool:
    """Whether a record's duration tells how long a run of its configuration takes (capacity searches and their
    probes do not)."""
    d = r.duration_s
    return bool(r.run_key) and isinstance(d, (int, float)) and d > 0 and not r.probe_of and r.metric != "max_batch_size"


def forecast(plan, records: list[Result], capacity_mode: bool = False) -> Forecast:
    """The plan's forecast from a store's records: the time of the configurations that ran before (nothing
    numeric without any), and the work of a GPU-sized session on the CPU (no GPU visible, devices auto/cpu).
    A capacity search's time depends on its probes: it has neither."""
    if not plan or capacity_mode:
        return Forecast(runs=len(plan))
    seen = Durations(records)
    known = [stats.median(seen.of(spec.run_key)) for spec in plan if seen.of(spec.run_key)]
    earlier = sum(len(seen.of(k)) for k in {spec.run_key for spec in plan})
    work = None
    if all(spec.device in ("auto", "cpu") for spec in plan) and not nvml.gpus():
        work = session_work_tflop(plan)
        work = work if work >= CPU_WARN_TFLOP else None
    return Forecast(runs=len(plan), known_s=sum(known) if known else None, known_runs=len(known),
                    earlier_runs=earlier, cpu_work_tflop=work)


class Durations:
    """The durations of stored runs, indexed once for the questions a --time-limit asks before every run: by
    configuration, and by backend, workload and execution mode. `add` takes in the session's new records (each
    run_id once), so a session of many runs over a large store does not re-read the store before each."""

    def __init__(self, records: list[Result] = ()):
        self._ids: set[str] = set()
        self._by_key: dict[str, list[float]] = {}
        self._alike: dict[tuple, list[float]] = {}
        for r in records:  # every one: a store holds each run_id once
            self._take(r)

    def add(self, records: list[Result]) -> None:
        """Take in the records not taken in before (by run_id; one without an id is taken as new)."""
        for r in records:
            if not (r.run_id and r.run_id in self._ids):
                self._take(r)

    def _take(self, r: Result) -> None:
        if r.run_id:
            self._ids.add(r.run_id)
        if _timed_run(r):
            d = r.run_s  # a wait for another session's run is no part of how long this one takes
            self._by_key.setdefault(r.run_key, []).append(d)
            self._alike.setdefault((r.backend, r.workload, r.param("execution")), []).append(d)

    def of(self, run_key: str) -> list[float]:
        """The durations of the runs of one configuration (empty where none ran)."""
        return self._by_key.get(run_key, [])

    def expected(self, spec) -> tuple[float, str] | None:
        """How long a run of `spec` is expected to take, and on what basis: the median duration of earlier runs
        of its configuration; else the longest earlier run of its backend, workload and execution mode (a
        configuration's first process is its slowest: it compiles cold); else None, nothing to go by."""
        runs = self.of(spec.run_key)
        if runs:
            return stats.median(runs), f"the median of {len(runs)} earlier run(s) of its configuration"
        execution = spec.param("execution")
        alike = self._alike.get((spec.backend, spec.workload, execution))
        if alike:
            mode = f", execution {execution}" if execution else ""
            return max(alike), f"the longest of {len(alike)} earlier run(s) of {spec.backend}, {spec.workload}{mode}"
        return None


def expected_duration(spec, records: list[Result]) -> tuple[float, str] | None:
    """How long a run of `spec` is expected to take, from `records` (a store's and the session's so far): see
    Durations.expected."""
    return Durations(records).expected(spec)
