"""How one value reads in a terminal table: a dash for what was not measured, integers as integers, other
numbers to four digits, bytes in GiB, a confidence interval in brackets (or `n/a` for one sample)."""

from __future__ import annotations

import numbers

from harness.results.record import Result

GiB = 1024**3
#: Where a CI cannot be given (one sample): said, not drawn as a zero-width interval.
NO_CI = "n/a"


def run_time(seconds: float) -> str:
    """Seconds as a run time: `57 s`, `23.6 min`, `2.1 h`. Not present.live.format_duration (`24 min`): run
    times of a file's parts are added up and compared, so minutes keep their tenth."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def is_missing(value) -> bool:
    """None, NaN, or pandas' NA/NaT (a record read back from a DataFrame): not measured."""
    if value is None:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return value != value
    return type(value).__name__ in ("NAType", "NaTType")


def number(value, digits=4) -> str:
    """A figure: a dash where missing, integers whole, thousands with separators, others to `digits` digits."""
    if is_missing(value):
        return "-"
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))  # numpy integers too: 1234, never 1234.0
    if isinstance(value, numbers.Real):
        value = float(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def cell(value) -> str:
    """Any value as table text: a dash for a missing one, integers as integers (`1024`, never
    `1024.0`, also where pandas made a column of integers float), other numbers to 4 digits."""
    if is_missing(value):
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        value = float(value)
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value)
    return str(value)


def gib(value) -> str:
    """Bytes as `0.62 GiB`; a dash where missing."""
    return "-" if is_missing(value) else f"{float(value) / GiB:.2f} GiB"


def sample_count(record: Result) -> int | None:
    """How many samples a record kept (its blocks); None where it recorded none, so the count is unknown."""
    samples = record.samples
    if samples and isinstance(samples, (list, tuple)):  # none recorded: the count is unknown
        return len([s for s in samples if not is_missing(s)])
    return None


def ci_text(record: Result) -> str:
    """` [low, high]`, ` [n/a]` for a figure from one sample (its bootstrap interval has no width:
    nothing to say about the spread), or '' where no interval was computed."""
    low, high = record.ci_low, record.ci_high
    if is_missing(low) or is_missing(high):
        return ""
    n = sample_count(record)
    if n is not None and n < 2 or (n is None and low == high):
        return f" [{NO_CI}]"
    return f" [{number(low)}, {number(high)}]"
