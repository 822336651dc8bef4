"""Plain-text tables of result records, for the terminal: a row per record (or per configuration, the median
over its processes), one table per workload, each fitted to the terminal (harness.present.fitting) with what
its rows share on a line above it. A value reads in a cell as harness.present.cells says.
"""

from __future__ import annotations

import statistics
from collections import Counter

from harness.present.cells import ci_text, gib, is_missing, number, sample_count
from harness.present.fitting import describe, fit
from harness.results.compare import as_results, backend_variant
from harness.results.record import Result


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
    if r.status not in ("ok", None) and not is_missing(r.error) and r.error:
        notes.insert(0, str(r.error).splitlines()[0][:120])
    return "; ".join(notes)


def _summary_row(r: Result, params: list[str]) -> dict:
    row = {"backend": r.backend, "device": r.device}
    for p in params:
        row[p] = r.param(p)
    row["status"] = r.status
    median = r.median
    if not is_missing(median):
        row["median [95% CI]"] = f"{number(median)}{ci_text(r)}"
    else:  # not measured (a timeout, a failure): a dash, no unit, no interval
        row["median [95% CI]"] = "-"
    row["unit"] = r.unit if not is_missing(median) else ""
    row["cv"] = f"{float(r.cv):.1%}" if not is_missing(r.cv) and (sample_count(r) or 2) >= 2 else "-"
    step = r.step_time_s
    row["step ms"] = number(float(step) * 1000) if not is_missing(step) and step else "-"
    row["first step s"] = number(r.first_step_s, 3)
    row["peak alloc"] = gib(r.peak_allocated_bytes)
    row["host rss"] = gib(r.host_peak_rss_bytes)
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


#: Columns of the results table that stay in it even when every row has the same value (the figures).
RESULT_KEEP = ("backend", "status", "median [95% CI]", "cv", "step ms", "first step s", "peak alloc", "host rss",
               "notes")
#: ... and that stay even when they are empty, however narrow the terminal.
RESULT_REQUIRED = ("backend", "median [95% CI]")
#: The results table's columns in order of importance, most important first: who ran, the figure with its
#: interval, which session (rows of two sessions are told apart by it), how it ended, its spread and step
#: time, then the rest. A narrow terminal leaves them out from the end of this list; the parameters (what
#: tells the rows apart) go only after all of them; the notes are footnotes.
RESULT_IMPORTANCE = ("backend", "median [95% CI]", "session", "status", "cv", "device", "step ms", "peak alloc",
                     "scenario", "device name", "first step s", "host rss")
#: Columns of the results table left out first when it is too wide for the terminal, in that order.
RESULT_OPTIONAL = RESULT_IMPORTANCE[:len(RESULT_REQUIRED) - 1:-1]


def _fitted_lines(rows: list[dict], width, wide: bool, lead: str = "") -> list[str]:
    fitted = fit(rows, width=width, wide=wide, keep=RESULT_KEEP, required=RESULT_REQUIRED, shorten=(),
                 optional=RESULT_OPTIONAL, footnotes=("notes",))
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
    counts = Counter(str(r.status) for r in records)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{status} {n}" for status, n in counts.items())


def _configuration_row(records: list[Result], names: list[str]) -> dict:
    """One configuration's row: its settings, how its processes ended, the median over its ok processes'
    medians with their range (the record's own CI where one process), and the largest memory peaks."""
    first = records[0]
    ok = [r for r in records if r.status == "ok" and not is_missing(r.median)]
    row = {"scenario": first.scenario, "workload": first.workload, "backend": backend_variant(first),
           "device": first.device, "device name": first.device_name}
    row.update({p: first.param(p) for p in names})
    row["status"] = _status_text(records)
    row["processes"] = len(records)
    medians = sorted(float(r.median) for r in ok)
    if len(medians) > 1:
        row["median [range]"] = f"{number(statistics.median(medians))} [{number(medians[0])}, {number(medians[-1])}]"
    else:
        row["median [range]"] = f"{number(medians[0])}{ci_text(ok[0])}" if medians else "-"
    row["unit"] = first.unit if medians else ""
    peaks = [r.peak_allocated_bytes for r in records if not is_missing(r.peak_allocated_bytes)]
    row["peak alloc"] = gib(max(peaks)) if peaks else "-"
    rss = [r.host_peak_rss_bytes for r in records if not is_missing(r.host_peak_rss_bytes)]
    row["host rss"] = gib(max(rss)) if rss else "-"
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
        fitted = fit(mine, width=width, keep=SUMMARY_KEEP, required=SUMMARY_REQUIRED, shorten=(),
                     optional=RESULT_OPTIONAL, footnotes=("notes",))
        lead = f"{workload}: " if len(workloads) > 1 else ""
        head = describe(fitted.common, fitted.width, lead=f"{lead}every row: ") if fitted.common else None
        parts.append("\n".join(p for p in (head, fitted.text, fitted.footer()) if p))
    return "\n\n".join(parts) + "\n(one row per configuration: the median over its processes; --wide: each process)"


def summary_table(records: list[Result], *, width: int | None = None, wide: bool = False) -> str:
    """The summary table printed at the end of `harness run` and by `harness results`."""
    return results_text(records, width=width, wide=wide)
