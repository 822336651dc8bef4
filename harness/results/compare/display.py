"""Comparison rows for people to read: formatted figures, what every row shares, and the notes under a table."""

from __future__ import annotations

from harness.results.compare.datasheet import DATASHEET_COLUMNS
from harness.results.compare.pairing import CI_WITHIN, RESULT_COLUMNS, SCALING_COLUMNS
from harness.results.compare.records import missing

#: Shown after the verdict of a row whose records say their machine was busy.
BUSY_NOTE = "(busy machine)"


def fmt(value, digits: int = 4) -> str:
    """A figure as a comparison shows it: a dash where missing, thousands grouped, else `digits` significant."""
    if missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)


def _true(value) -> bool:
    return not missing(value) and bool(value)


def _p(value) -> str:
    if missing(value):
        return "-"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def _rows(table) -> list[dict]:
    return table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)


def _common(rows: list[dict]) -> tuple[dict, list[str]]:
    """(match columns whose value every row shares, with it; the match columns that vary)."""
    result = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS) | set(SCALING_COLUMNS)
    common, varying = {}, []
    for column in [c for c in rows[0] if c not in result]:
        seen = {repr(r.get(column)) for r in rows}
        if len(seen) == 1:
            if not missing(rows[0].get(column)):
                common[column] = rows[0][column]
        else:
            varying.append(column)
    common["compared"] = rows[0]["compared"]
    return common, varying


def _display_row(r: dict, varying: list[str]) -> dict:
    row = {c: fmt(r.get(c)) for c in varying}
    row["baseline"] = r["baseline"]
    row["value"] = r["value"]
    row["baseline median"] = fmt(r["baseline_median"])
    row["median"] = fmt(r["value_median"])
    row["unit"] = r.get("unit") or ""
    ci = f" [{fmt(r['ratio_ci_low'])}, {fmt(r['ratio_ci_high'])}]" if not missing(r.get("ratio_ci_low")) else ""
    if ci and r.get("ci_basis") == CI_WITHIN:
        ci += f" {CI_WITHIN}"
    row["ratio [95% CI]"] = f"{fmt(r['ratio'])}{ci}"
    row["change"] = "-" if missing(r.get("change_pct")) else f"{r['change_pct']:+.1f}%"
    row["p"] = _p(r.get("p_value"))
    row["verdict"] = r["verdict"] + (f" {BUSY_NOTE}" if _true(r.get("busy")) else "")
    row["processes"] = f"{r['baseline_runs']} vs {r['value_runs']}"
    if "datasheet_ratio" in r:
        row["datasheet ratio"] = r.get("datasheet") or "-"
    if "scaling_efficiency" in r:
        eff = r.get("scaling_efficiency")
        row["scaling efficiency"] = "-" if missing(eff) else f"{100 * eff:.1f}%"
    row["warnings"] = r.get("warnings") or ""
    return row


def display_rows(table) -> tuple[dict, list[dict]]:
    """(fields common to every row, one formatted row per comparison) for people to read."""
    rows = _rows(table)
    if not rows:
        return {}, []
    common, varying = _common(rows)
    return common, [_display_row(r, varying) for r in rows]


def describe_common(common: dict) -> str:
    """One line naming what every compared row has in common."""
    compared = common.get("compared")
    rest = ", ".join(f"{k}={v}" for k, v in common.items() if k != "compared")
    return f"compared: {compared}" + (f"; every row: {rest}" if rest else "")


def table_notes(table) -> list[str]:
    """Lines to print under a displayed comparison: what a within-process CI or a busy mark means."""
    rows = _rows(table)
    notes = []
    if any(r.get("ci_basis") == CI_WITHIN for r in rows):
        notes.append(f"{CI_WITHIN}: one process per side, so the CI comes from the timed blocks of those two "
                     "processes; it leaves out the spread between processes and no verdict rests on it.")
    if any(_true(r.get("busy")) for r in rows):
        notes.append(f"{BUSY_NOTE}: some records were measured while the load average exceeded the cores, "
                     "other processes computed on their GPU or the host's other GPUs, or with the host shared "
                     "(--share-host) (see warnings); rerun on a quiet machine.")
    return notes
