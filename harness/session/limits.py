"""The limits a session puts on each worker, its host memory (--memory-limit) and its time (--timeout), and on
itself (--time-limit), checked before anything is read, planned or written; `TimeLimit` keeps the last as the
session runs."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from harness.errors import InputError
from harness.results.record import Result
from harness.seam.runspec import RunSpec
from harness.timing.settings import MIN_TIMEOUT_S

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 10**6, "mb": 10**6, "mib": 1024**2,
          "g": 10**9, "gb": 10**9, "gib": 1024**3, "t": 10**12, "tb": 10**12, "tib": 1024**4}

#: The smallest --memory-limit accepted. A worker imports its framework under the limit before it
#: measures anything: measured on the 2-core CPU machine (2026-11-30, RLIMIT_DATA), a worker running
#: a 64x64 gemm needs about 850 MiB with torch 2.14 (importing torch alone: 783 MiB) and about
#: 480 MiB with TensorFlow 2.21; below that every worker dies while importing. 1 GiB leaves room.
MIN_MEMORY_LIMIT = 1024**3
MIN_MEMORY_LIMIT_TEXT = "1GiB"
#: The largest limit the OS can be given (setrlimit takes a C long).
MAX_MEMORY_LIMIT = 2**63 - 1
#: The longest --timeout accepted (measure.timeout_s allows the same).
MAX_TIMEOUT_S = 7 * 86_400


def parse_size(text: str) -> int:
    """Bytes from a size such as 512MiB, 4GiB, 2G or 1000000000; InputError (before anything is
    written) for anything that is not a size, below MIN_MEMORY_LIMIT, or beyond what the OS can set."""
    expected = f"expected a size such as 4GiB, 1.5GiB or 2000MB, at least {MIN_MEMORY_LIMIT_TEXT}"
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:37] + "...")
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text or "") if len(text or "") <= 64 else None
    if not match or match.group(2).lower() not in _UNITS:
        raise InputError(f"--memory-limit {shown}: {expected}", field="--memory-limit")
    size = int(Fraction(match.group(1)) * _UNITS[match.group(2).lower()])
    if size > MAX_MEMORY_LIMIT:
        raise InputError(f"--memory-limit {shown}: more than the largest limit the OS can set ({MAX_MEMORY_LIMIT} bytes, "
                         f"8 EiB); {expected}", field="--memory-limit")
    if size < MIN_MEMORY_LIMIT:
        raise InputError(
            f"--memory-limit {shown}: {size} bytes is below {MIN_MEMORY_LIMIT_TEXT}, the smallest limit a worker can "
            "work under (it imports its framework first: torch 2.14 needs about 850 MiB, TensorFlow 2.21 about 480 MiB); "
            f"{expected}", field="--memory-limit")
    return size


def check_timeout(value: float | None) -> float | None:
    """--timeout as given: finite, at least MIN_TIMEOUT_S, at most 7 days (InputError otherwise); None where not given."""
    if value is None:
        return None
    if not math.isfinite(value) or value < MIN_TIMEOUT_S or value > MAX_TIMEOUT_S:
        raise InputError(f"--timeout {value!r}: expected a finite number of seconds, at least {MIN_TIMEOUT_S:g} (a "
                         f"worker starts a Python and its framework first) and at most {MAX_TIMEOUT_S} (7 days)",
                         field="--timeout")
    return value


#: The longest --time-limit accepted (as --timeout).
MAX_TIME_LIMIT_S = MAX_TIMEOUT_S
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600}


def parse_time_limit(text: str | None) -> float | None:
    """--time-limit in seconds from `540`, `540s`, `9m`, `1h30m` or `[HH:]MM:SS`; InputError (exit 2, before anything
    is read or written) for anything else, for zero or less, and beyond 7 days; None where not given."""
    if text is None:
        return None
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:37] + "...")
    value = str(text).strip().lower()
    seconds = None
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", value):
        seconds = float(value)
    elif re.fullmatch(r"([0-9]+(\.[0-9]+)?[hms])+", value):
        parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)([hms])", value)
        if len({unit for _, unit in parts}) == len(parts):  # each unit once: 1h30m, not 1m1m
            seconds = sum(float(n) * _DURATION_UNITS[unit] for n, unit in parts)
    elif re.fullmatch(r"([0-9]+:)?[0-9]+:[0-5][0-9]", value):
        seconds = float(sum(int(n) * 60**i for i, n in enumerate(reversed(value.split(":")))))
    if seconds is None or not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_TIME_LIMIT_S:
        raise InputError(f"--time-limit {shown}: expected a duration more than 0 and at most 7 days: seconds (540), "
                         "with a unit (540s, 9m, 1h30m) or [HH:]MM:SS", field="--time-limit")
    return seconds


@dataclass(frozen=True)
class TimeLimitStop:
    """Where a session's --time-limit stopped it: before run `index` (1-based) of the plan, `spec`, which was
    expected to take `expected_s` (on `basis`: earlier runs) with `left_s` of the limit left."""

    limit_s: float
    index: int
    spec: RunSpec
    expected_s: float | None
    basis: str
    left_s: float


@dataclass
class TimeLimit:
    """A session's --time-limit: a run starts only while the time it is expected to take fits in what is left of
    the limit, so that no run is cut off by whatever ends the session's time (a job's wall time, a machine's
    lease). `expected(spec, records so far)` gives (seconds, basis) or None: a run with nothing to go by starts
    while any time is left. The limit counts from `start` on `clock`."""

    seconds: float
    expected: Callable[[RunSpec, list[Result]], tuple[float, str] | None]
    clock: Callable[[], float] = time.monotonic
    start: float | None = None

    def __post_init__(self):
        if self.start is None:
            self.start = self.clock()

    def stop_before(self, index: int, spec: RunSpec, records: list[Result]) -> TimeLimitStop | None:
        """Why run `index` (`spec`) must not start, or None where it may."""
        left = self.start + self.seconds - self.clock()
        if left <= 0:
            return TimeLimitStop(self.seconds, index, spec, None, "no time left", 0.0)
        guess = self.expected(spec, records)
        if guess is not None and guess[0] > left:
            return TimeLimitStop(self.seconds, index, spec, guess[0], guess[1], left)
        return None
