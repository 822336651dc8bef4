"""A comparison (harness.results.compare) as text: the terminal table, CSV, JSON, Markdown, the lines
under it and the regressions `--fail-if-slower` reports."""

from __future__ import annotations

import json
import math

from harness.present.report.page import markdown_table, markdown_text
from harness.present.table import cell, describe, fit
from harness.results.compare import (
    DATASHEET_COLUMNS,
    RESULT_COLUMNS,
    describe_common,
    describe_fastest,
    display_rows,
    fastest_configurations,
    slowdown_pct,
    table_notes,
)

#: Columns of the comparison that stay in the table even when every row has the same value.
COMPARE_KEEP = ("baseline", "value", "baseline median", "median", "ratio [95% CI]", "change", "p", "verdict", "warnings")
#: Left out first when the table is too wide for the terminal.
COMPARE_OPTIONAL = ("change",)
#: ... and, once the warnings and verdicts are as short as they get, these (the ratio says it).
COMPARE_LAST_RESORT = (("baseline median", "median"), "p")


def _plain(value):
    # JSON has no NaN: a figure that is missing is null
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def table_lines(table, common: dict, rows: list[dict], *, wide: bool = False, width: int | None = None) -> list[str]:
    """The comparison for the terminal: `compared: ...; every row: ...` (what the rows share,
    wrapped), the table fitted to the width, and a line saying what it shortened or left out.

    Integers stay integers (`size=1024`, also where pandas made the column float); a ratio without
    an interval (one process against several, or one timed block) says `[n/a]`.
    """

    raw = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    shown = []
    for source, row in zip(raw, rows):
        row = dict(row)
        for key in row:  # the match fields as they were, not through compare's number format
            if key in source and key not in RESULT_COLUMNS and key not in DATASHEET_COLUMNS and key != "verdict":
                row[key] = cell(source[key])
        ratio = row.get("ratio [95% CI]")
        if ratio and ratio != "-" and "[" not in ratio:
            row["ratio [95% CI]"] = f"{ratio} [n/a]"
        shown.append(row)
    compared = common.get("compared")
    rest = {k: cell(v) for k, v in common.items() if k != "compared"}
    fitted = fit(shown, width=width, wide=wide, keep=COMPARE_KEEP, required=COMPARE_KEEP[:-1], shorten={"warnings": 16, "verdict": 32},
                 optional=COMPARE_OPTIONAL, last_resort=COMPARE_LAST_RESORT)
    shared = {**rest, **fitted.common}
    head = f"compared: {compared}"
    if shared:
        head = describe(shared, 10**9 if wide else fitted.width, lead=f"{head}; every row: ")
    lines = [head, fitted.text]
    if fitted.footer():
        lines.append(fitted.footer())
    return lines


def comparison_text(table, fmt: str, *, wide: bool, records=None, by=(), metric: str = "median") -> str:
    """The comparison in a format (table, csv, json, markdown), as `harness compare` prints it: a table or
    Markdown with the notes under it and, by backend, each variant's fastest configuration (of `records`)."""
    if fmt == "json":
        rows = [{k: _plain(v) for k, v in r.items()} for r in table.to_dict(orient="records")]
        return json.dumps(rows, indent=1, default=str) + "\n"
    if fmt == "csv":
        return table.to_csv(index=False)
    common, rows = display_rows(table)
    if fmt == "markdown":
        lines = [markdown_text(describe_common(common)) + "\n", markdown_table(rows)]
    else:
        lines = table_lines(table, common, rows, wide=wide)
    notes = table_notes(table)
    if "backend" in by:
        notes += describe_fastest(fastest_configurations(records, metric))
    lines += [markdown_text(note) for note in notes] if fmt == "markdown" else notes
    return "".join(line + "\n" for line in lines)


def _where(row: dict, common: dict) -> str:
    """The match fields that tell this row from the others ('' when there is one kind of row)."""

    skip = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS) | set(common)
    where = ", ".join(f"{k}={v}" for k, v in row.items() if k not in skip and v is not None and v == v)
    return f" for {where}" if where else ""


def regression_lines(table, regressed: list[dict], pct: float) -> list[str]:
    """What `--fail-if-slower PCT` says: a line per regressed row and a last line for the whole table."""
    common, _ = display_rows(table)
    lines = [f"regression: {row['value']} is {slowdown_pct(row):.1f}% slower than {row['baseline']}"
             f" (ratio {row['ratio']:.4g} [{row['ratio_ci_low']:.4g}, {row['ratio_ci_high']:.4g}],"
             f" p={row['p_value']:.2g}){_where(row, common)}" for row in regressed]
    if regressed:
        return lines + [f"{len(regressed)} row(s) slower by more than {pct:g}%"]
    return [f"no row slower by more than {pct:g}%"]
