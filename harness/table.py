"""Plain-text tables of result records, for the terminal."""

from __future__ import annotations

GiB = 1024**3


def _fmt(value, digits=4) -> str:
    if value is None:
        return "-"
    try:
        if value != value:  # NaN
            return "-"
    except TypeError:
        pass
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}g}"
    return str(value)


def _bytes(value) -> str:
    return "-" if value is None or value != value else f"{value / GiB:.2f} GiB"


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
        if median is not None:
            ci = ""
            if r.get("ci_low") is not None and r.get("ci_high") is not None:
                ci = f" [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]"
            row["median [95% CI]"] = f"{_fmt(median)}{ci}"
        else:
            row["median [95% CI]"] = "-"
        row["unit"] = r.get("unit") if median is not None else ""
        row["cv"] = f"{r['cv']:.1%}" if r.get("cv") is not None else "-"
        row["step ms"] = _fmt(r["step_time_s"] * 1000) if r.get("step_time_s") else "-"
        row["first step s"] = _fmt(r.get("first_step_s"), 3)
        row["peak alloc"] = _bytes(r.get("peak_allocated_bytes"))
        row["host rss"] = _bytes(r.get("host_peak_rss_bytes"))
        notes = list(r.get("warnings") or [])
        if r.get("status") not in ("ok", None) and r.get("error"):
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
