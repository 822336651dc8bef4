"""Regressions: the comparison rows significantly slower than their baseline by more than a threshold."""

from __future__ import annotations

from harness.results.compare.records import missing
from harness.results.compare.row import ComparisonRow, rows_of
from harness.results.compare.verdicts import SLOWER


def slowdown_pct(row: ComparisonRow) -> float | None:
    """By how many percent the value is slower than the baseline (negative: faster)."""
    ratio = row.ratio
    if missing(ratio) or ratio == 0:
        return None
    speed = ratio if row.higher_is_better else 1.0 / ratio
    return 100.0 * (1.0 - speed)


def fail_if_slower(table, pct: float) -> list[ComparisonRow]:
    """Rows (of comparison rows, or the DataFrame `compare` gave) that are significantly slower than their baseline
    by more than pct percent."""
    return [row for row in rows_of(table)
            if row.verdict == SLOWER and (loss := slowdown_pct(row)) is not None and loss > pct]
