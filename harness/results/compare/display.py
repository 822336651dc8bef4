"""Comparison rows for people to read: formatted figures, what every row shares, and the notes under a table."""

from __future__ import annotations

from harness.results.compare.pairing import CI_WITHIN
from harness.results.compare.records import missing
from harness.results.compare.row import FIGURE_COLUMNS, ComparisonRow, rows_of

#: Shown after the verdict of a row whose records say their machine was busy.
BUSY_NOTE = "(busy machine)"


def fmt(value, digits: int = 4) -> str:
    """A figure as a comparison shows it: a dash where missing, thousands grouped, else `digits` significant."""
    if missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)


def _p(value) -> str:
    if missing(value):
        return "-"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def _common(rows: list[ComparisonRow]) -> tuple[dict, list[str]]:
    """(match fields whose value every row shares, with it; the match fields that vary: a field only some rows have,
    another workload's parameter, varies)."""
    common, varying = {}, []
    for column in [c for c in dict.fromkeys(c for r in rows for c in r.where) if c not in FIGURE_COLUMNS]:
        seen = {repr(r.fixed(column)) for r in rows}
        if len(seen) == 1:
            if not missing(rows[0].fixed(column)):
                common[column] = rows[0].fixed(column)
        else:
            varying.append(column)
    common["compared"] = rows[0].compared
    return common, varying


def _display_row(r: ComparisonRow, varying: list[str]) -> dict:
    row = {c: fmt(r.fixed(c)) for c in varying}
    row["baseline"] = r.baseline
    row["value"] = r.value
    row["baseline median"] = fmt(r.baseline_median)
    row["median"] = fmt(r.value_median)
    row["unit"] = r.unit or ""
    ci = f" [{fmt(r.ratio_ci_low)}, {fmt(r.ratio_ci_high)}]" if not missing(r.ratio_ci_low) else ""
    if ci and r.ci_basis == CI_WITHIN:
        ci += f" {CI_WITHIN}"
    row["ratio [95% CI]"] = f"{fmt(r.ratio)}{ci}"
    row["change"] = "-" if missing(r.change_pct) else f"{r.change_pct:+.1f}%"
    row["p"] = _p(r.p_value)
    row["verdict"] = r.verdict + (f" {BUSY_NOTE}" if r.busy else "")
    row["processes"] = f"{r.baseline_runs} vs {r.value_runs}"
    if r.by_device:
        row["datasheet ratio"] = r.datasheet or "-"
    if r.by_scaling:
        eff = r.scaling_efficiency
        row["scaling efficiency"] = "-" if missing(eff) else f"{100 * eff:.1f}%"
    row["warnings"] = r.warnings or ""
    return row


def display_rows(table) -> tuple[dict, list[dict]]:
    """(fields common to every row, one formatted row per comparison) for people to read: of comparison rows (a
    DataFrame or row dicts are read as such)."""
    rows = rows_of(table)
    if not rows:
        return {}, []
    common, varying = _common(rows)
    return common, [_display_row(r, varying) for r in rows]


def describe_common(common: dict) -> str:
    """One line naming what every compared row has in common."""
    compared = common["compared"] if "compared" in common else None
    rest = ", ".join(f"{k}={v}" for k, v in common.items() if k != "compared")
    return f"compared: {compared}" + (f"; every row: {rest}" if rest else "")


def table_notes(table) -> list[str]:
    """Lines to print under a displayed comparison: what a within-process CI or a busy mark means."""
    rows = rows_of(table)
    notes = []
    if any(r.ci_basis == CI_WITHIN for r in rows):
        notes.append(f"{CI_WITHIN}: one process per side, so the CI comes from the timed blocks of those two "
                     "processes; it leaves out the spread between processes and no verdict rests on it.")
    if any(r.busy for r in rows):
        notes.append(f"{BUSY_NOTE}: some records were measured while the load average exceeded the cores, "
                     "other processes computed on their GPU or the host's other GPUs, or with the host shared "
                     "(--share-host) (see warnings); rerun on a quiet machine.")
    return notes
