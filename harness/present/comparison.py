"""A comparison (harness.results.compare) as text: the terminal table, CSV, JSON, Markdown, the lines
under it and the regressions `--fail-if-slower` reports."""

from __future__ import annotations

import json
import math

from harness.present.cells import cell
from harness.present.fitting import describe, fit, terminal_width, wrap
from harness.present.report.page import markdown_table, markdown_text
from harness.results.compare import (
    CI_WITHIN,
    FIGURE_COLUMNS,
    ComparisonRow,
    describe_common,
    describe_fastest,
    display_rows,
    fastest_configurations,
    frame_of,
    slowdown_pct,
    table_notes,
)
from harness.results.store.exports import spreadsheet_safe

#: Columns of the comparison that stay in the table even when every row has the same value.
COMPARE_KEEP = ("baseline", "value", "baseline median", "median", "ratio [95% CI]", "change", "p", "verdict", "warnings")
#: The comparison's columns in order of importance, most important first: what is compared and the answer
#: (the ratio with its interval, the verdict), by how much (the change, both medians), how sure (p), then
#: what the header line or --wide can say. A narrow terminal leaves them out from the end of this list;
#: a match column (what tells the rows apart) goes only after all of them; the warnings are footnotes
#: marked on the verdict they qualify.
COMPARE_IMPORTANCE = ("value", "ratio [95% CI]", "verdict", "change", ("baseline median", "median"), "p",
                      "scaling efficiency", "datasheet ratio", "processes", "unit", "baseline")
#: Columns that stay however narrow the terminal: what is compared and the answer.
COMPARE_REQUIRED = COMPARE_IMPORTANCE[:3]


def _plain(value):
    # JSON has no NaN: a figure that is missing is null
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def _shown_rows(raw: list[ComparisonRow], rows: list[dict], metric: str) -> list[dict]:
    """The display rows with the match fields as they were (not through compare's number format), a
    ratio without an interval saying `[n/a]`, and a byte metric's figures in GiB or MiB."""
    shown = []
    for source, row in zip(raw, rows):
        row = dict(row)
        for key in row:
            if key in source.where and key not in FIGURE_COLUMNS and key != "verdict":
                row[key] = cell(source.fixed(key))
        ratio = row["ratio [95% CI]"]
        if ratio and ratio != "-" and "[" not in ratio:
            row["ratio [95% CI]"] = f"{ratio} [n/a]"
        if metric.endswith("_bytes"):
            row["baseline median"] = size_text(source.baseline_median)
            row["median"] = size_text(source.value_median)
            row.pop("unit", None)
        shown.append(row)
    return shown


def _shared_reasons(shown: list[dict]) -> list[str]:
    """Where every row's verdict gives the same reason (`inconclusive: 1 process per side ...`), the cells
    keep the verdict's word and the reason becomes one line under the table; so does a within-process CI."""
    notes = []
    verdicts = {str(r["verdict"]) for r in shown}
    if len(verdicts) == 1 and ": " in next(iter(verdicts)):
        word, reason = next(iter(verdicts)).split(": ", 1)
        for row in shown:
            row["verdict"] = word
        notes.append(f"{word}: {reason}")
    suffix = f" {CI_WITHIN}"
    ratios = [str(r["ratio [95% CI]"]) for r in shown]
    if ratios and all(r.endswith(suffix) for r in ratios):
        for row in shown:
            row["ratio [95% CI]"] = row["ratio [95% CI]"][: -len(suffix)]
        notes.append(f"every CI above is {CI_WITHIN} (see below)")
    return notes


def pool_text(records, shown: list[dict]) -> str:
    """What a comparison pools, for its header line: `from session ID` or `pooled: N sessions (IDS)`, and
    the processes a side where every row has the same (`4 vs 4 processes`); '' where nothing is known."""
    sessions = list(dict.fromkeys(str(r.session_id) for r in records or () if r.session_id))
    parts = []
    if len(sessions) == 1:
        parts.append(f"from session {sessions[0]}")
    elif sessions:
        listed = ", ".join(sessions[:3]) + (", ..." if len(sessions) > 3 else "")
        parts.append(f"pooled: {len(sessions)} sessions ({listed})")
    counts = {str(row.get("processes")) for row in shown}
    if len(counts) == 1 and shown and "processes" in shown[0]:
        parts.append(f"{counts.pop()} processes")
    return ", ".join(parts)


def _one_table(shown: list[dict], common: dict, *, wide: bool, width: int | None, lead: str,
               pool: str = "") -> list[str]:
    rest = {k: cell(v) for k, v in common.items() if k != "compared"}
    if pool:
        lead = f"{lead}; {pool}"
        if not wide and "processes" in pool.split(", ")[-1]:  # said in the lead: not again in every row
            shown = [{k: v for k, v in row.items() if k != "processes"} for row in shown]
    notes = [] if wide else _shared_reasons(shown)
    for name in ("baseline", "verdict"):  # the same in every row: said once above the table
        if not wide and len(shown) > 1 and len({str(r[name]) for r in shown}) == 1:
            rest[name] = shown[0][name]
            shown = [{k: v for k, v in row.items() if k != name} for row in shown]
    fitted = fit(shown, width=width, wide=wide, keep=COMPARE_KEEP, required=COMPARE_REQUIRED,
                 shorten={"verdict": 24}, last_resort=COMPARE_IMPORTANCE[:len(COMPARE_REQUIRED) - 1:-1],
                 footnotes=("warnings",), marked="verdict")
    shared = {**rest, **fitted.common}
    head = lead
    if shared:
        head = describe(shared, 10**9 if wide else fitted.width, lead=f"{lead}; every row: ")
    lines = [head, fitted.text]
    if fitted.footer():
        lines.append(fitted.footer())
    return lines + [wrap([n], fitted.width) for n in notes]


def table_lines(table: list[ComparisonRow], common: dict, rows: list[dict], *, wide: bool = False,
                width: int | None = None, metric: str = "median", records=None) -> list[str]:
    """The comparison for the terminal: `compared: ...; every row: ...` (what the rows share,
    wrapped), the table fitted to the width, and a line saying what it shortened or left out.

    Rows of several workloads make one table each (a workload's parameters are `-` on the other's
    rows). Integers stay integers (`size=1024`, also where pandas made the column float); a ratio
    without an interval (one process against several, or one timed block) says `[n/a]`; a byte
    metric (`host_peak_rss_bytes`) reads in GiB or MiB. With `records`, the header line says what the
    comparison pools: the sessions and the processes a side.
    """

    shown = _shown_rows(table, rows, metric)
    compared = common["compared"]
    workloads = list(dict.fromkeys(r.fixed("workload") for r in table))
    if len(workloads) < 2:
        return _one_table(shown, common, wide=wide, width=width, lead=f"compared: {compared}",
                          pool=pool_text(records, shown) if records is not None else "")
    lines = []
    for workload in workloads:
        mine = [row for source, row in zip(table, shown) if source.fixed("workload") == workload]
        part = [{k: v for k, v in row.items() if k != "workload"} for row in mine]
        if lines:
            lines.append("")
        pool = pool_text([r for r in records if r.workload == workload], part) if records is not None else ""
        lines += _one_table(part, common, wide=wide, width=width, lead=f"{workload}: compared: {compared}",
                            pool=pool)
    return lines


def size_text(value) -> str:
    """A byte count as people read it: GiB from 1 GiB up, else MiB; a dash where missing."""
    if value is None or value != value:
        return "-"
    value = float(value)
    return f"{value / 1024**3:.2f} GiB" if abs(value) >= 1024**3 else f"{value / 1024**2:.1f} MiB"


def comparison_text(table: list[ComparisonRow], fmt: str, *, wide: bool, records=None, by=(),
                    metric: str = "median", pooled: bool = False) -> str:
    """The comparison in a format (table, csv, json, markdown), as `harness compare` prints it: a table or
    Markdown with the notes under it and, by backend, each variant's fastest configuration (of `records`);
    `pooled`: the table's header line says which sessions and how many processes a side it pools. CSV
    and JSON are the rows of `compare`'s DataFrame."""
    if fmt == "json":
        rows = [{k: _plain(v) for k, v in r.items()} for r in frame_of(table).to_dict(orient="records")]
        return json.dumps(rows, indent=1, default=str) + "\n"
    if fmt == "csv":
        return spreadsheet_safe(frame_of(table)).to_csv(index=False)
    common, rows = display_rows(table)
    if fmt == "markdown":
        lines = [markdown_text(describe_common(common)) + "\n", markdown_table(rows)]
    else:
        lines = table_lines(table, common, rows, wide=wide, metric=metric, records=records if pooled else None)
    after = table_notes(table)
    if "backend" in by:
        after += describe_fastest(fastest_configurations(records, metric))
    if fmt == "markdown":
        after = [markdown_text(note) for note in after]
    elif fmt == "table" and not wide:  # each line under the table fits the terminal too
        after = [wrap(line.split(" "), terminal_width(), sep=" ") for line in after]
    lines += after
    return "".join(line + "\n" for line in lines)


def _where(row: ComparisonRow, common: dict) -> str:
    """The match fields that tell this row from the others ('' when there is one kind of row)."""

    skip = FIGURE_COLUMNS | set(common)
    where = ", ".join(f"{k}={v}" for k, v in row.where.items() if k not in skip and v is not None and v == v)
    return f" for {where}" if where else ""


def regression_lines(table: list[ComparisonRow], regressed: list[ComparisonRow], pct: float) -> list[str]:
    """What `--fail-if-slower PCT` says: a line per regressed row and a last line for the whole table."""
    common, _ = display_rows(table)
    lines = [f"regression: {row.value} is {slowdown_pct(row):.1f}% slower than {row.baseline}"
             f" (ratio {row.ratio:.4g} [{row.ratio_ci_low:.4g}, {row.ratio_ci_high:.4g}],"
             f" p={row.p_value:.2g}){_where(row, common)}" for row in regressed]
    if regressed:
        return lines + [f"{len(regressed)} row(s) slower by more than {pct:g}%"]
    return [f"no row slower by more than {pct:g}%"]
