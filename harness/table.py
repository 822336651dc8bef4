"""Plain-text tables of result records, for the terminal."""

from __future__ import annotations

import numbers

GiB = 1024**3


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


def _bytes(value) -> str:
    return "-" if _missing(value) else f"{float(value) / GiB:.2f} GiB"


def varying_params(records: list[dict]) -> list[str]:
    """Parameter names whose value differs between records (what a sweep varied)."""
    keys: dict[str, set] = {}
    for r in records:
        for k, v in (r.get("params") or {}).items():
            keys.setdefault(k, set()).add(repr(v))
    return [k for k, vals in keys.items() if len(vals) > 1]


def summary_rows(records: list[dict], params: list[str] | None = None) -> list[dict]:
    """One display row per record: who ran what, status, headline with its CI, step time, memory, warnings."""
    params = varying_params(records) if params is None else params
    rows = []
    for r in records:
        row = {"backend": r.get("backend"), "device": r.get("device")}
        for p in params:
            row[p] = (r.get("params") or {}).get(p)
        row["status"] = r.get("status")
        median = r.get("median")
        if not _missing(median):
            ci = ""
            if not _missing(r.get("ci_low")) and not _missing(r.get("ci_high")):
                ci = f" [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
            row["median [95% CI]"] = f"{_fmt(median)}{ci}"
        else:  # not measured (a timeout, a failure): a dash, no unit, no interval
            row["median [95% CI]"] = "-"
        row["unit"] = r.get("unit") if not _missing(median) else ""
        row["cv"] = f"{float(r['cv']):.1%}" if not _missing(r.get("cv")) else "-"
        step = r.get("step_time_s")
        row["step ms"] = _fmt(float(step) * 1000) if not _missing(step) and step else "-"
        row["first step s"] = _fmt(r.get("first_step_s"), 3)
        row["peak alloc"] = _bytes(r.get("peak_allocated_bytes"))
        row["host rss"] = _bytes(r.get("host_peak_rss_bytes"))
        warnings = r.get("warnings")
        notes = [str(w) for w in warnings] if isinstance(warnings, (list, tuple)) else []
        if r.get("status") not in ("ok", None) and not _missing(r.get("error")) and r.get("error"):
            notes.insert(0, str(r["error"]).splitlines()[0][:120])
        row["notes"] = "; ".join(notes)
        rows.append(row)
    return rows


def render(rows: list[dict]) -> str:
    """Rows as an aligned text table (pandas formatting, left-aligned notes)."""
    import pandas as pd

    if not rows:
        return "(no results)"
    frame = pd.DataFrame(rows).fillna("-")
    with pd.option_context("display.max_colwidth", 160, "display.width", 250, "display.max_columns", 50):
        return frame.to_string(index=False)


def summary_table(records: list[dict]) -> str:
    """The summary table printed at the end of `harness run` and by `harness results`."""
    return render(summary_rows(records))
