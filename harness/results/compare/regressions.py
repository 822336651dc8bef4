"""Regressions: the comparison rows significantly slower than their baseline by more than a threshold."""

from __future__ import annotations

from harness.results.compare.records import missing
from harness.results.compare.verdicts import SLOWER


def slowdown_pct(row) -> float | None:
    """By how many percent the value is slower than the baseline (negative: faster)."""
    ratio = row.get("ratio")
    if missing(ratio) or ratio == 0:
        return None
    speed = ratio if row.get("higher_is_better", True) else 1.0 / ratio
    return 100.0 * (1.0 - speed)


def fail_if_slower(table, pct: float) -> list[dict]:
    """Rows that are significantly slower than their baseline by more than pct percent."""
    rows = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    out = []
    for row in rows:
        loss = slowdown_pct(row)
        if row.get("verdict") == SLOWER and loss is not None and loss > pct:
            out.append(row)
    return out
