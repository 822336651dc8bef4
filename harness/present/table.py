"""Plain-text tables of result records, for the terminal.

A table fits the terminal (`COLUMNS`, else the terminal's width, else DEFAULT_WIDTH): a column whose
value is the same in every row moves to a header line above the table (`every row: device=cpu,
...`), a column empty in every row is left out, long notes are shortened, and if it is still too
wide the least needed columns are left out, saying which. `wide=True` prints everything.
"""

from __future__ import annotations

import numbers
import re
import shutil
import statistics
from dataclasses import dataclass, field

from harness.results.compare import as_results, backend_variant
from harness.results.record import Result

GiB = 1024**3
#: Width of a table printed where there is no terminal to ask and `COLUMNS` is not set (a pipe, a file).
DEFAULT_WIDTH = 120
#: A shortened column keeps at least this many characters before optional columns are left out ...
MIN_SHORTENED = 32
#: ... and at least this many once they are.
MIN_SHORTENED_HARD = 16
#: Between two columns.
GAP = "  "
#: Marks a shortened cell.
ELLIPSIS = "..."
#: Where a CI cannot be given (one sample): said, not drawn as a zero-width interval.
NO_CI = "n/a"


def run_time(seconds: float) -> str:
    """Seconds as a run time: `57 s`, `23.6 min`, `2.1 h`. Not present.live.format_duration (`24 min`): run
    times of a file's parts are added up and compared, so minutes keep their tenth."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def _missing(value) -> bool:
    """None, NaN, or pandas' NA/NaT (a record read back from a DataFrame): not measured."""
    if value is None:
        return True
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return value != value
    return type(value).__name__ in ("NAType", "NaTType")


def _fmt(value, digits=4) -> str:
    if _missing(value):
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
    if _missing(value):
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


def _bytes(value) -> str:
    return "-" if _missing(value) else f"{float(value) / GiB:.2f} GiB"


def _samples(record: Result) -> int | None:
    samples = record.samples
    if samples and isinstance(samples, (list, tuple)):  # none recorded: the count is unknown
        return len([s for s in samples if not _missing(s)])
    return None


def ci_text(record: Result) -> str:
    """` [low, high]`, ` [n/a]` for a figure from one sample (its bootstrap interval has no width:
    nothing to say about the spread), or '' where no interval was computed."""
    low, high = record.ci_low, record.ci_high
    if _missing(low) or _missing(high):
        return ""
    n = _samples(record)
    if n is not None and n < 2 or (n is None and low == high):
        return f" [{NO_CI}]"
    return f" [{_fmt(low)}, {_fmt(high)}]"


def varying_params(records: list[Result]) -> list[str]:
    """Parameter names whose value differs between records (what a sweep varied)."""
    keys: dict[str, set] = {}
    for r in as_results(records):
        for k, v in (r.params or {}).items():
            keys.setdefault(k, set()).add(repr(v))
    return [k for k, vals in keys.items() if len(vals) > 1]


def _notes(r: Result) -> str:
    """A record's warnings, led by the first line of its error where it did not end ok."""
    warnings = r.warnings
    notes = [str(w) for w in warnings] if isinstance(warnings, (list, tuple)) else []
    if r.status not in ("ok", None) and not _missing(r.error) and r.error:
        notes.insert(0, str(r.error).splitlines()[0][:120])
    return "; ".join(notes)


def _summary_row(r: Result, params: list[str]) -> dict:
    row = {"backend": r.backend, "device": r.device}
    for p in params:
        row[p] = (r.params or {}).get(p)
    row["status"] = r.status
    median = r.median
    if not _missing(median):
        row["median [95% CI]"] = f"{_fmt(median)}{ci_text(r)}"
    else:  # not measured (a timeout, a failure): a dash, no unit, no interval
        row["median [95% CI]"] = "-"
    row["unit"] = r.unit if not _missing(median) else ""
    row["cv"] = f"{float(r.cv):.1%}" if not _missing(r.cv) and (_samples(r) or 2) >= 2 else "-"
    step = r.step_time_s
    row["step ms"] = _fmt(float(step) * 1000) if not _missing(step) and step else "-"
    row["first step s"] = _fmt(r.first_step_s, 3)
    row["peak alloc"] = _bytes(r.peak_allocated_bytes)
    row["host rss"] = _bytes(r.host_peak_rss_bytes)
    row["notes"] = _notes(r)
    return row


def summary_rows(records: list[Result], params: list[str] | None = None) -> list[dict]:
    """One display row per record: who ran what, status, headline with its CI, step time, memory, warnings."""
    records = as_results(records)
    params = varying_params(records) if params is None else params
    return [_summary_row(r, params) for r in records]


def result_rows(records: list[Result]) -> list[dict]:
    """The terminal's rows of records: session, scenario, workload, backend (with its non-default
    options), device and its name, every parameter (image size included), then summary_rows' figures."""

    records = as_results(records)
    names = list(dict.fromkeys(k for r in records for k in (r.params or {})))
    rows = []
    for record, row in zip(records, summary_rows(records, params=names)):
        row.pop("backend", None)
        row.pop("device", None)
        lead = {"session": record.session_id, "scenario": record.scenario,
                "workload": record.workload, "backend": backend_variant(record),
                "device": record.device, "device name": record.device_name}
        rows.append({**lead, **row})
    return rows


# --------------------------------------------------------------------------- fitting the terminal
def terminal_width() -> int:
    """`COLUMNS`, else the terminal's width, else DEFAULT_WIDTH (standard output is not a terminal)."""
    return max(20, shutil.get_terminal_size(fallback=(DEFAULT_WIDTH, 24)).columns)


@dataclass
class Fitted:
    """A table laid out for a width: the values every row shares, the text, and what was cut."""

    common: dict[str, str] = field(default_factory=dict)
    text: str = ""
    shortened: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    width: int = DEFAULT_WIDTH

    def footer(self) -> str | None:
        """One line saying what the table does not show in full, or None."""
        parts = []
        if self.shortened:
            parts.append(f"{', '.join(self.shortened)} shortened")
        if self.hidden:
            parts.append(f"columns left out: {', '.join(self.hidden)}")
        if not parts:
            return None
        import textwrap

        text = f"({'; '.join(parts)} to fit {self.width} columns; --wide shows everything)"
        return "\n".join(textwrap.wrap(text, width=max(20, self.width), subsequent_indent=" ", break_long_words=False))


_NUMBER = re.compile(r"[-+<]?(\d[\d,]*)?\.?\d+(e[-+]?\d+)?%?")


def _right_aligned(cells: list[str]) -> bool:
    """Numbers (a cell led by one: `0.5 [0.4, 0.6]`, `0.62 GiB`, `5 vs 5`) align right, text left."""
    shown = [c for c in cells if c not in ("-", "")]
    return bool(shown) and all(_NUMBER.fullmatch(c.split(" ", 1)[0]) for c in shown)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - len(ELLIPSIS))].rstrip() + ELLIPSIS


def _set_aside(columns: list[str], cells: dict, out: Fitted, *, keep, required, move: bool) -> None:
    """Leave out the columns empty in every row (but the `required`); with `move`, put a column (not kept
    or required) whose value is the same in every row into `out.common`."""
    for c in list(columns):
        values = cells[c]
        if c in required:
            continue
        if all(v in ("-", "") for v in values):
            columns.remove(c)
        elif move and c not in keep and len(set(values)) == 1:
            out.common[c] = values[0]
            columns.remove(c)


class _Widths:
    """The columns shown and their widths, as they are cut to fit a width."""

    def __init__(self, columns: list[str], cells: dict, width: int, shorten) -> None:
        self.columns, self.width = columns, width
        self.full = {c: max(len(c), *(len(v) for v in cells[c])) for c in columns}
        self.sizes = dict(self.full)
        self.floors = dict(shorten) if isinstance(shorten, dict) else {c: MIN_SHORTENED_HARD for c in shorten}

    def total(self) -> int:
        """The table's width at the current sizes."""
        return sum(self.sizes[c] for c in self.columns) + len(GAP) * (len(self.columns) - 1)

    def fits(self) -> bool:
        """Whether the table fits the width."""
        return self.total() <= self.width

    def cut(self, least: int | None) -> None:
        """Shorten the `shorten` columns in their order, each down to `least` (None: its own floor),
        until the table fits."""
        self.sizes.update(self.full)
        for c in self.floors:
            over = self.total() - self.width
            if over <= 0:
                return
            if c in self.columns:
                floor = max(len(c), self.floors[c] if least is None else max(least, self.floors[c]))
                self.sizes[c] = min(self.sizes[c], max(floor, self.sizes[c] - over))

    def leave_out(self, names, out: Fitted) -> None:
        """Leave these columns out, saying so in `out.hidden`."""
        for c in names:
            if c in self.columns:
                self.columns.remove(c)
                out.hidden.append(c)


def _narrow(widths: _Widths, out: Fitted, optional, last_resort, keep=(), required=()) -> None:
    """Cut and leave out columns until the table fits: the `shorten` columns to MIN_SHORTENED, the `optional`
    columns out, the `shorten` columns to their floors, the `last_resort` columns out, then any column
    from the right (`_last_columns_out`)."""
    widths.cut(MIN_SHORTENED)
    for c in optional:  # the least needed columns go before the notes shrink below MIN_SHORTENED
        if widths.fits():
            break
        if c in widths.columns:
            widths.leave_out([c], out)
            widths.cut(MIN_SHORTENED)
    widths.cut(None)
    for group in last_resort:  # a name, or names that go together (two sides of one figure)
        if widths.fits():
            break
        widths.leave_out([group] if isinstance(group, str) else group, out)
        widths.cut(None)
    _last_columns_out(widths, out, keep, required)
    out.shortened = [c for c in widths.columns if widths.sizes[c] < widths.full[c]]


def _last_columns_out(widths: _Widths, out: Fitted, keep, required) -> None:
    """Still too wide: leave out columns from the right until the table fits: the notes and warnings
    first (`--wide` and the record keep them), then those neither kept nor required (the later a
    setting, the less it tells rows apart), then the kept ones;
    the required columns stay, shortened to what is left, so the table never exceeds the width."""
    for pool in ([c for c in widths.floors if c in widths.columns and c not in required],  # notes, warnings
                 [c for c in widths.columns if c not in keep and c not in required],
                 [c for c in widths.columns if c not in required]):
        for c in reversed(pool):
            if widths.fits():
                return
            widths.leave_out([c], out)
            widths.cut(None)
    over = widths.total() - widths.width
    for c in reversed(widths.columns):  # only required columns are left: shorten them, the last first
        if over <= 0:
            break
        cut = min(over, widths.sizes[c] - min(len(ELLIPSIS) + 1, widths.sizes[c]))
        widths.sizes[c] -= cut
        over -= cut


def _aligned(columns: list[str], cells: dict, sizes: dict, n_rows: int) -> str:
    """The header and rows, each cell shortened to its column's size, numbers right-aligned."""
    lines = []
    align = {c: _right_aligned(cells[c]) for c in columns}
    for values in [list(columns)] + [[cells[c][i] for c in columns] for i in range(n_rows)]:
        parts = []
        for c, v in zip(columns, values):
            v = _shorten(v, sizes[c])
            parts.append(v.rjust(sizes[c]) if align[c] else v.ljust(sizes[c]))
        lines.append(GAP.join(parts).rstrip())
    return "\n".join(lines)


def fit(rows: list[dict], *, width: int | None = None, wide: bool = False, keep=(), required=(),
        shorten=("notes", "warnings"), optional=(), last_resort=(), move: bool = True) -> Fitted:
    """Lay `rows` out for `width` columns (default: terminal_width()).

    Not `wide`: columns empty in every row are left out (except the `required` ones); with `move`,
    a column (not in `keep` or `required`) whose value is the same in every row goes to `common`;
    the `shorten` columns are cut to fit in their order (each to at least MIN_SHORTENED
    characters); then the `optional` columns are left
    out in their order, and the `shorten` columns cut further, to their own floor (`shorten` may map
    each to its floor; MIN_SHORTENED_HARD otherwise), and last the `last_resort` columns (or groups
    of columns) left out, until the table fits. `wide`: every column in full.
    """
    width = terminal_width() if width is None else int(width)
    out = Fitted(width=width)
    if not rows:
        out.text = "(no results)"
        return out
    columns = list(dict.fromkeys(k for row in rows for k in row))
    cells = {c: [cell(row.get(c)) if not isinstance(row.get(c), str) else row.get(c) for row in rows] for c in columns}
    if not wide:
        _set_aside(columns, cells, out, keep=keep, required=required, move=move)
    widths = _Widths(columns, cells, width, shorten)
    if not wide:
        _narrow(widths, out, optional, last_resort, keep, required)
    out.text = _aligned(widths.columns, cells, widths.sizes, len(rows))
    return out


def wrap(items: list[str], width: int | None = None, *, lead: str = "", sep: str = ", ") -> str:
    """`lead` and the items joined by `sep`, wrapped to the width between items (an item is never
    split: `device name=AMD EPYC` stays whole), continuation lines indented."""
    width = max(20, terminal_width() if width is None else width)
    lines, line = [], lead
    for i, item in enumerate(items):
        piece = item + (sep.rstrip() if i < len(items) - 1 else "")
        if line.strip() and len(line) + len(piece) > width:
            lines.append(line.rstrip())
            line = "  "
        line += piece + (" " if i < len(items) - 1 else "")
    lines.append(line.rstrip())
    return "\n".join(lines)


def describe(common: dict, width: int | None = None, *, lead: str = "every row: ") -> str | None:
    """`every row: key=value, ...` wrapped to the width, or None when nothing is common."""
    if not common:
        return None
    return wrap([f"{k}={v}" for k, v in common.items()], width, lead=lead)


#: Columns of the results table that stay in it even when every row has the same value (the figures).
RESULT_KEEP = ("backend", "status", "median [95% CI]", "cv", "step ms", "first step s", "peak alloc", "host rss",
               "notes")
#: ... and that stay even when they are empty, however narrow the terminal.
RESULT_REQUIRED = ("backend", "median [95% CI]")
#: Columns of the results table left out first when it is too wide for the terminal.
RESULT_OPTIONAL = ("host rss", "first step s", "session", "device name", "scenario", "peak alloc", "step ms", "cv",
                   "device")


def _fitted_lines(rows: list[dict], width, wide: bool, lead: str = "") -> list[str]:
    fitted = fit(rows, width=width, wide=wide, keep=RESULT_KEEP, required=RESULT_REQUIRED, shorten=("notes",),
                 optional=RESULT_OPTIONAL)
    head = describe(fitted.common, fitted.width, lead=f"{lead}every row: ") if fitted.common else (lead.rstrip(": ")
                                                                                                   or None)
    return [p for p in (head, fitted.text, fitted.footer()) if p]


def rows_text(rows: list[dict], *, width: int | None = None, wide: bool = False) -> str:
    """Display rows (with a `workload` column) for the terminal: one table per workload, each with what
    its rows share on a line above it and a line saying what was shortened or left out."""
    workloads = list(dict.fromkeys(r.get("workload") for r in rows))
    if wide or len(workloads) < 2:
        return "\n".join(_fitted_lines(rows, width, wide))
    parts = []
    for workload in workloads:
        mine = [{k: v for k, v in r.items() if k != "workload"} for r in rows if r.get("workload") == workload]
        parts.append("\n".join(_fitted_lines(mine, width, wide, lead=f"{workload}: ")))
    return "\n\n".join(parts)


def results_text(records: list[Result], *, width: int | None = None, wide: bool = False) -> str:
    """The results table for the terminal: one table per workload, what every row shares on a line
    above it, and a line saying what was shortened or left out."""
    if not records:
        return "(no results)"
    return rows_text(result_rows(records), width=width, wide=wide)


def _status_text(records: list[Result]) -> str:
    counts: dict[str, int] = {}
    for r in records:
        counts[str(r.status)] = counts.get(str(r.status), 0) + 1
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{status} {n}" for status, n in counts.items())


def _configuration_row(records: list[Result], names: list[str]) -> dict:
    """One configuration's row: its settings, how its processes ended, the median over its ok processes'
    medians with their range (the record's own CI where one process), and the largest memory peaks."""
    first = records[0]
    ok = [r for r in records if r.status == "ok" and not _missing(r.median)]
    row = {"scenario": first.scenario, "workload": first.workload, "backend": backend_variant(first),
           "device": first.device, "device name": first.device_name}
    row.update({p: (first.params or {}).get(p) for p in names})
    row["status"] = _status_text(records)
    row["processes"] = len(records)
    medians = sorted(float(r.median) for r in ok)
    if len(medians) > 1:
        row["median [range]"] = f"{_fmt(statistics.median(medians))} [{_fmt(medians[0])}, {_fmt(medians[-1])}]"
    else:
        row["median [range]"] = f"{_fmt(medians[0])}{ci_text(ok[0])}" if medians else "-"
    row["unit"] = first.unit if medians else ""
    peaks = [r.peak_allocated_bytes for r in records if not _missing(r.peak_allocated_bytes)]
    row["peak alloc"] = _bytes(max(peaks)) if peaks else "-"
    rss = [r.host_peak_rss_bytes for r in records if not _missing(r.host_peak_rss_bytes)]
    row["host rss"] = _bytes(max(rss)) if rss else "-"
    row["notes"] = "; ".join(dict.fromkeys(n for r in records for n in _notes(r).split("; ") if n))
    return row


def configuration_rows(records: list[Result]) -> list[dict]:
    """One display row per configuration (a run_key: every process of it), in the order first run."""
    records = as_results(records)
    names = list(dict.fromkeys(k for r in records for k in (r.params or {})))
    groups: dict[str, list[Result]] = {}
    for r in records:
        groups.setdefault(r.run_key or r.run_id, []).append(r)
    return [_configuration_row(group, names) for group in groups.values()]


#: Columns of the per-configuration summary kept when every row has the same value, and required.
SUMMARY_KEEP = ("backend", "status", "processes", "median [range]", "peak alloc", "notes")
SUMMARY_REQUIRED = ("backend", "processes", "median [range]")


def configuration_summary(records: list[Result], *, width: int | None = None, wide: bool = False) -> str:
    """`harness run`'s summary: one row per configuration (the median over its processes, their range,
    how many; one table per workload), fitted to the terminal; `wide`: every process's row in full."""
    if not records:
        return "(no results)"
    if wide:
        return results_text(records, width=width, wide=True)
    rows = configuration_rows(records)
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    parts = []
    for workload in workloads:
        mine = [{k: v for k, v in r.items() if k != "workload" or len(workloads) < 2} for r in rows
                if r["workload"] == workload]
        fitted = fit(mine, width=width, keep=SUMMARY_KEEP, required=SUMMARY_REQUIRED, shorten=("notes",),
                     optional=RESULT_OPTIONAL)
        lead = f"{workload}: " if len(workloads) > 1 else ""
        head = describe(fitted.common, fitted.width, lead=f"{lead}every row: ") if fitted.common else None
        parts.append("\n".join(p for p in (head, fitted.text, fitted.footer()) if p))
    return "\n\n".join(parts) + "\n(one row per configuration: the median over its processes; --wide: each process)"


def render(rows: list[dict]) -> str:
    """Rows as an aligned text table, every column in full (left-aligned text, right-aligned numbers)."""
    return fit(rows, wide=True).text


def summary_table(records: list[Result], *, width: int | None = None, wide: bool = False) -> str:
    """The summary table printed at the end of `harness run` and by `harness results`."""
    return results_text(records, width=width, wide=wide)
