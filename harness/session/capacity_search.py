"""Where a capacity search probes next, as pure functions of what the probes so far said: doubling from the
start, the memory model's guesses once two probes fit, a backend's tensor-size bound, then bisection until the
bracket is as narrow as asked; and how long a probe may take."""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds a probe gets beyond its scaled estimate (process start, imports, a compile that does not scale).
PROBE_SLACK_S = 60.0


@dataclass(frozen=True)
class Bounds:
    """Where a search starts, the largest batch it tries, and how narrow its answer's bracket must be."""

    start: int
    limit: int
    resolution: int | str


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
