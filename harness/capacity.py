"""Capacity: the largest batch_size that trains without running out of memory.

Doubling from `start` until a probe runs out of memory (or `limit` is reached), then bisection
between the last batch that fit and the first that did not, each probe in its own worker process
so an out-of-memory never leaks into the next probe. One result record per configuration, with
metric `max_batch_size`; every probe is stored too (marked `probe_of`), so nothing measured is lost.
"""

from __future__ import annotations

import signal
from dataclasses import replace

from harness.plan import RunSpec, new_id, run_key
from harness.record import blank_record, utc_now
from harness.runner import Interrupted, Runner, SessionOutcome, trap_signals

#: A probe runs one warm-up step and one timed step: enough for the optimizer state and the
#: allocator's peak to appear, cheap enough to repeat a dozen times.
PROBE_MEASURE = {"warmup": 1, "steps": 1, "repeats": 1, "min_time_s": None, "max_repeats": None, "target_ci_pct": None}


def fits(record: dict) -> bool | None:
    """True if a probe trained, False if it ran out of memory, None if it failed otherwise.

    A worker killed by SIGKILL on the CPU is counted as out of memory: that is what the OS
    out-of-memory killer sends (the record's note says so).
    """
    status = record.get("status")
    if status == "ok":
        return True
    if status == "oom":
        return False
    if status == "failed" and "SIGKILL" in str(record.get("error")):
        return False
    return None


def search(probe, start: int = 1, limit: int = 65536, resolution: int = 1) -> tuple[int, int | None, list, str | None]:
    """Largest n in [start, limit] with probe(n) True, assuming monotonicity.

    Returns (largest fitting, smallest failing or None, [(n, outcome)], error). `probe` returns
    True, False, or None (an error that is not out of memory, which stops the search).
    Bisection stops when the bracket is at most `resolution` wide.
    """
    history = []

    def check(n):
        outcome = probe(n)
        history.append((n, outcome))
        return outcome

    lo, hi = 0, None
    n = max(1, start)
    while True:
        ok = check(n)
        if ok is None:
            return lo, hi, history, f"probe at batch_size={n} failed for a reason other than memory"
        if not ok:
            hi = n
            break
        lo = n
        if n >= limit:
            return lo, None, history, None
        n = min(n * 2, limit)
    while hi - lo > max(1, resolution):
        mid = (lo + hi) // 2
        ok = check(mid)
        if ok is None:
            return lo, hi, history, f"probe at batch_size={mid} failed for a reason other than memory"
        if ok:
            lo = mid
        else:
            hi = mid
    return lo, hi, history, None


def capacity_key(spec: RunSpec) -> str:
    """The run_key of a configuration's capacity record: its spec's, with batch_size left open."""
    return run_key(spec.scenario, spec.workload, spec.backend, spec.device, {**spec.params, "batch_size": None})


def find_max_batch(runner: Runner, plan: list[RunSpec], start: int = 1, limit: int = 65536, resolution: int = 1) -> SessionOutcome:
    """Search the largest batch_size for every distinct configuration of the plan; store everything."""
    outcome = SessionOutcome()
    configs: dict[str, RunSpec] = {}
    for spec in plan:
        configs.setdefault(capacity_key(spec), spec)
    with trap_signals():
        try:
            _search_all(runner, configs, outcome, start, limit, resolution)
        except (Interrupted, KeyboardInterrupt) as exc:
            outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
    return outcome


def _search_all(runner, configs, outcome, start, limit, resolution) -> None:
    """Search each configuration in turn, storing every probe and one capacity record each."""
    for i, (key, spec) in enumerate(configs.items(), 1):
        base = replace(spec, measure={**spec.measure, **PROBE_MEASURE})
        capacity_id = new_id()
        runner.on_start(i, len(configs), replace(spec, params={**spec.params, "batch_size": "?"}))
        probes: list[dict] = []

        def probe(n: int):
            probe_spec = base.with_params(batch_size=n)
            record = runner.execute(probe_spec)
            record["probe_of"] = capacity_id
            runner.store.add(record)
            probes.append(record)
            return fits(record)

        started = utc_now()
        static = runner.static_status(base)
        record = blank_record(replace(spec, run_id=capacity_id, run_key=key))
        record.update(started_at=started, metric="max_batch_size", unit="images")
        if static is not None:
            record["status"], record["error"] = static
        else:
            best, first_bad, history, error = search(probe, start, limit, resolution)
            last = next((p for p in reversed(probes) if fits(p)), None)
            failing = next((p for p in probes if p["params"].get("batch_size") == first_bad), None)
            record.update(
                status="ok" if error is None and best > 0 else "failed",
                error=error if error else (None if best > 0 else f"batch_size={start} does not fit"),
                median=float(best) if best else None,
                samples=[float(best)] if best else [],
                params={**spec.params, "batch_size": best or None},
                device=(last or (probes[0] if probes else {})).get("device", spec.device),
                device_name=(last or (probes[0] if probes else {})).get("device_name"),
                framework_version=(last or (probes[0] if probes else {})).get("framework_version"),
                api=(last or {}).get("api") or {},
                peak_allocated_bytes=(last or {}).get("peak_allocated_bytes"),
                host_peak_rss_bytes=(last or {}).get("host_peak_rss_bytes"),
                env=(last or (probes[0] if probes else {})).get("env") or {},
                checks={
                    "probes": [[n, p.get("status")] for (n, _), p in zip(history, probes)],
                    "first_failing_batch_size": first_bad,
                    "failure": (failing or {}).get("error"),
                    "search": f"doubling from {start}, then bisection to within {resolution}; limit {limit}",
                    "reached_limit": first_bad is None and best >= limit,
                },
                duration_s=sum(p.get("duration_s") or 0 for p in probes),
            )
            if failing is not None and failing.get("status") == "failed":
                record["warnings"] = ["a probe killed by SIGKILL was counted as out of memory (the OS OOM killer)"]
        runner.store.add(record)
        outcome.records.append(record)
        runner.on_result(i, len(configs), record)
