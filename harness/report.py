"""`harness report`: a self-contained HTML page and a Markdown file with plots of stored results.

Plots are drawn with matplotlib's Agg canvas (no display, no pyplot state); the HTML embeds them as
base64 PNG data URIs, the Markdown links PNG files written beside it.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.compare import (
    DATASHEET_COLUMNS, RESULT_COLUMNS, as_records, technique_baselines, compare, describe_common, display_rows,
    ok_records, technique_speedups,
)
from harness.errors import InputError

GiB = 1024**3
RESNET = "resnet50_train"
GEMM = "gemm"


@dataclass
class Plot:
    """One figure of the report: its file name, title, PNG bytes and a caption."""

    slug: str
    title: str
    png: bytes
    caption: str = ""


@dataclass
class Section:
    """A titled part of the report: plots, tables (lists of display rows) and lines of text, in order."""

    title: str
    parts: list = field(default_factory=list)  # items: Plot, ("table", rows), ("text", str), ("list", [str])


# --------------------------------------------------------------------------- tables as text
def _cell(value) -> str:
    text = "-" if value is None else str(value)
    return text.replace("\n", " ")


def markdown_table(rows: list[dict]) -> str:
    """Rows as a GitHub-flavoured Markdown table (columns in first-seen order, pipes escaped)."""
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    esc = lambda v: _cell(v).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(esc(c) for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(esc(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def html_table(rows: list[dict]) -> str:
    """Rows as an HTML table."""
    if not rows:
        return "<p>(no rows)</p>"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(r.get(c)))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# --------------------------------------------------------------------------- helpers
def _figure(width: float = 7.5, height: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", metadata={"Software": None})
    return buf.getvalue()


def _device_label(record: dict) -> str:
    name, device = record.get("device_name"), record.get("device")
    return f"{name} ({device})" if name else str(device)


def _varying(records: list[dict], exclude: tuple[str, ...] = ()) -> list[str]:
    seen: dict[str, set] = {}
    for r in records:
        for k, v in (r.get("params") or {}).items():
            seen.setdefault(k, set()).add(repr(v))
    return [k for k, values in seen.items() if len(values) > 1 and k not in exclude]


def _record_label(record: dict, params: list[str]) -> str:
    parts = [str(record.get("workload")), str(record.get("backend")), _device_label(record)]
    values = record.get("params") or {}
    parts += [f"{p}={values[p]}" for p in params if values.get(p) is not None]
    return " ".join(parts)


def _samples(records: list[dict]) -> list[float]:
    out = [float(s) for r in records for s in (r.get("samples") or []) if s is not None]
    return out or [float(r["median"]) for r in records if r.get("median") is not None]


def _series(records: list[dict], x_param: str) -> tuple[dict[str, dict], str]:
    """Records grouped into lines of points keyed by x_param, and a note naming the usual settings.

    A line is one backend and device, plus every other parameter that varies; its label names only
    the settings that differ from the most common value, which the note names once.
    """
    from collections import Counter

    others = _varying(records, (x_param,))
    usual = {p: Counter(repr((r.get("params") or {}).get(p)) for r in records).most_common(1)[0][0] for p in others}
    lines: dict[str, dict] = {}
    for r in records:
        params = r.get("params") or {}
        x = params.get(x_param)
        if x is None:
            continue
        label = " ".join([str(r.get("backend")), _device_label(r)]
                         + [f"{p}={params.get(p)}" for p in others if repr(params.get(p)) != usual[p]])
        lines.setdefault(label, {}).setdefault(x, []).append(r)
    note = ""
    if others:
        values = {p: next((r.get("params") or {}).get(p) for r in records
                          if repr((r.get("params") or {}).get(p)) == usual[p]) for p in others}
        note = " Lines not labelled otherwise have " + ", ".join(f"{p}={v}" for p, v in values.items()) + "."
    return lines, note


def _line_styles(labels: list[str], records: list[dict]):
    """A (colour, line style, marker) per line label: colour per configuration, style and marker per backend."""
    backends = list(dict.fromkeys(str(r.get("backend")) for r in records))
    styles, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D"]
    configurations: list[str] = []
    out = {}
    for label in labels:
        b = next((j for j, name in enumerate(backends) if label.startswith(name + " ")), 0)
        configuration = label[len(backends[b]) + 1:] if backends else label
        if configuration not in configurations:
            configurations.append(configuration)
        colour = f"C{configurations.index(configuration) % 10}"
        out[label] = (colour, styles[b % len(styles)], markers[b % len(markers)])
    return out


def _legend(ax, count: int) -> None:
    if count > 4:  # outside the axes, where it hides no line
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.legend(fontsize="small")


# --------------------------------------------------------------------------- plots
def plot_throughput_vs_batch(records: list[dict]) -> Plot | str:
    """Throughput (median, 95% CI) against batch size, one line per backend and device; or why it is skipped."""
    resnet = [r for r in records if r.get("workload") == RESNET]
    lines, note = _series(resnet, "batch_size")
    if not lines:
        return f"No {RESNET} results with status ok: throughput against batch size skipped."
    styles = _line_styles(sorted(lines), resnet)
    fig = _figure()
    ax = fig.add_subplot()
    unit = next((r.get("unit") for r in resnet if r.get("unit")), "images/s")
    for label, points in sorted(lines.items()):
        xs = sorted(points)
        meds, lows, highs = [], [], []
        for x in xs:
            samples = _samples(points[x])
            med = stats.median(samples)
            low, high = stats.bootstrap_ci(samples)
            meds.append(med)
            lows.append(med - low)
            highs.append(high - med)
        colour, style, marker = styles[label]
        ax.errorbar(xs, meds, yerr=[lows, highs], color=colour, linestyle=style, marker=marker, capsize=3, label=label)
    _batch_axis(ax, [x for p in lines.values() for x in p])
    ax.set_ylabel(f"throughput ({unit})")
    ax.set_title("ResNet-50 training throughput against batch size (median, 95% CI)")
    ax.grid(True, alpha=0.3)
    _legend(ax, len(lines))
    return Plot("throughput_vs_batch_size", "Throughput against batch size", _png(fig),
                "Median images/s of the timed blocks; error bars are the bootstrap 95% CI of the median." + note)


def plot_memory_vs_batch(records: list[dict]) -> Plot | str:
    """Framework allocator peak against batch size, one line per backend and device; or why it is skipped."""
    resnet = [r for r in records if r.get("workload") == RESNET and r.get("peak_allocated_bytes") is not None]
    lines, note = _series(resnet, "batch_size")
    if not lines:
        return f"No {RESNET} results with a peak allocated memory: memory against batch size skipped."
    styles = _line_styles(sorted(lines), resnet)
    fig = _figure()
    ax = fig.add_subplot()
    for label, points in sorted(lines.items()):
        xs = sorted(points)
        ys = [stats.median([r["peak_allocated_bytes"] for r in points[x]]) / GiB for x in xs]
        colour, style, marker = styles[label]
        ax.plot(xs, ys, color=colour, linestyle=style, marker=marker, label=label)
    _batch_axis(ax, [x for p in lines.values() for x in p])
    ax.set_ylabel("peak allocated (GiB)")
    ax.set_title("Framework allocator peak against batch size")
    ax.grid(True, alpha=0.3)
    _legend(ax, len(lines))
    return Plot("memory_vs_batch_size", "Peak allocated memory against batch size", _png(fig),
                "The framework allocator's peak over the measured steps (not NVML's device memory used)." + note)


def _batch_axis(ax, xs) -> None:
    xs = sorted(set(xs))
    if len(xs) > 1 and xs[-1] / max(xs[0], 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([str(x) for x in xs])
    ax.set_xlabel("batch size")


def plot_technique_speedups(tables: dict) -> Plot | str:
    """Ratio of each technique value to its baseline value (95% CI), bars coloured by backend."""
    rows = [r for frame in tables.values() for r in frame.to_dict(orient="records")]
    if not rows:
        return ("No technique was measured at two values (precision, execution, recompute, memory_format)"
                " under otherwise equal settings: technique speedups skipped.")
    result = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS)
    context = list(dict.fromkeys(c for r in rows for c in r if c not in result and c not in technique_baselines()))
    def present(value) -> bool:
        return value is not None and value == value  # NaN: a column another workload has

    def shown(value) -> str:
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)

    # within each workload, only the settings that differ between its bars label them
    varying: dict[str, list[str]] = {}
    for workload in dict.fromkeys(r.get("workload") for r in rows):
        group = [r for r in rows if r.get("workload") == workload]
        varying[workload] = [c for c in context if c not in ("backend", "workload")
                             and len({shown(r.get(c)) for r in group if present(r.get(c))}) > 1]
    several = len(varying) > 1
    labels = []
    for r in rows:
        parts = [f"{r['compared']} {r['value']} vs {r['baseline']}", str(r.get("backend"))]
        parts += [str(r.get("workload"))] if several else []
        parts += [f"{c}={shown(r.get(c))}" for c in varying[r.get("workload")] if present(r.get(c))]
        labels.append(" | ".join(parts))
    fig = _figure(9, max(2.5, 0.45 * len(rows) + 1.5))
    ax = fig.add_subplot()
    colours = {}
    cycle = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    for i, r in enumerate(rows):
        backend = str(r.get("backend"))
        colour = colours.setdefault(backend, cycle[len(colours) % len(cycle)])
        ratio = r["ratio"]
        if ratio is None or r.get("ratio_ci_low") is None:
            continue
        err = [[max(ratio - r["ratio_ci_low"], 0)], [max(r["ratio_ci_high"] - ratio, 0)]]
        significant = r["verdict"] in ("faster", "slower")
        ax.barh(i, ratio, xerr=err, color=colour, alpha=0.9 if significant else 0.35, capsize=3,
                label=backend if backend not in ax.get_legend_handles_labels()[1] else None)
        note = f"{r['change_pct']:+.1f}%" + ("" if significant else " (n.s.)")
        ax.text(r["ratio_ci_high"], i, " " + note, va="center", fontsize="small")
    ax.axvline(1.0, color="black", linewidth=1)
    highs = [r["ratio_ci_high"] for r in rows if r.get("ratio_ci_high") is not None]
    ax.set_xlim(0, max(highs + [1.0]) * 1.18)  # room for the percent labels
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("ratio to baseline (higher is faster)")
    ax.set_title("Speedup of each technique against its baseline (95% CI; pale: not significant)")
    ax.legend(fontsize="small")
    ax.grid(True, axis="x", alpha=0.3)
    return Plot("technique_speedups", "Speedup of each technique", _png(fig),
                "Ratio of medians with a bootstrap 95% CI; a pale bar is not significant (Mann-Whitney p >= 0.05 "
                "or the CI includes 1). Baselines: " + ", ".join(f"{k}={v}" for k, v in technique_baselines().items()) + ".")


def plot_gemm_vs_peak(records: list[dict]) -> Plot | str:
    """Achieved GEMM TFLOP/s beside the device's datasheet peak for the precision; or why it is skipped."""
    from harness.peaks import peak_tflops

    gemm = [r for r in records if r.get("workload") == GEMM and (r.get("tflops") is not None or r.get("median") is not None)]
    if not gemm:
        return f"No {GEMM} results with status ok: TFLOP/s against datasheet peak skipped."
    others = _varying(gemm, ("precision",))
    bars: dict[tuple, list[dict]] = {}
    for r in gemm:
        params = r.get("params") or {}
        label = " ".join([str(r.get("backend")), _device_label(r), str(params.get("precision"))]
                         + [f"{p}={params.get(p)}" for p in others])
        bars.setdefault((label, r.get("device_name"), params.get("precision", "fp32")), []).append(r)
    fig = _figure(max(6.0, 0.8 * len(bars) + 3), 4.8)
    ax = fig.add_subplot()
    missing = []
    for i, ((label, device_name, precision), rs) in enumerate(bars.items()):
        achieved = stats.median([r["tflops"] if r.get("tflops") is not None else r["median"] for r in rs])
        ax.bar(i, achieved, color="#1f77b4", label="measured" if i == 0 else None)
        peak = peak_tflops(device_name, precision)
        if peak:
            ax.plot([i - 0.4, i + 0.4], [peak, peak], color="#d62728", linewidth=2,
                    label="datasheet peak" if "datasheet peak" not in ax.get_legend_handles_labels()[1] else None)
            ax.text(i, achieved, f"{100 * achieved / peak:.0f}%", ha="center", va="bottom", fontsize="small")
        else:
            missing.append(f"{device_name or 'unknown device'} {precision}")
    ax.set_xticks(range(len(bars)))
    ax.set_xticklabels([k[0] for k in bars], rotation=30, ha="right", fontsize="small")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("GEMM: achieved TFLOP/s against the datasheet peak")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    caption = "Median TFLOP/s; the red line is the dense datasheet peak for that precision, the label the percent of it."
    if missing:
        caption += " No datasheet figure for: " + ", ".join(sorted(set(missing))) + "."
    return Plot("gemm_vs_peak", "GEMM TFLOP/s against the datasheet peak", _png(fig), caption)


# --------------------------------------------------------------------------- the report
def device_ratio_rows(records: list[dict]) -> list[dict] | str:
    """Measured device ratios beside datasheet ratios as display rows; or why there are none."""
    names = {r.get("device_name") for r in records} - {None}
    if len(names) < 2:
        return "Only one device in these results: no device ratios."
    try:
        table = compare(records, ["device_name"])
    except InputError as exc:
        return f"No device ratios: {exc}"
    common, rows = display_rows(table)
    return [{k: v for k, v in r.items() if k not in ("warnings",)} for r in rows] or "No device ratios."


def result_rows(records: list[dict]) -> list[dict]:
    """The results summary table (harness.table's rows), led by workload, device name and session where they vary."""
    from harness.table import summary_rows

    lead = [f for f in ("workload", "device_name", "session_id") if len({r.get(f) for r in records}) > 1]
    rows = []
    for record, row in zip(records, summary_rows(records)):
        rows.append({**{f: record.get(f) for f in lead}, **row})
    return rows


def warning_lines(records: list[dict]) -> list[str]:
    """Every record's warnings (and the error of a record that is not ok), one line each."""
    params = _varying(records)
    out = []
    for r in records:
        label = _record_label(r, params)
        if r.get("status") not in ("ok", None):
            error = str(r.get("error") or "").splitlines()[0][:200] if r.get("error") else ""
            out.append(f"{label}: status {r['status']}" + (f": {error}" if error else ""))
        for warning in r.get("warnings") or []:
            out.append(f"{label}: {warning}")
    return out


def build_sections(records) -> list[Section]:
    """The report's sections, in order, from result records (all statuses; plots use only ok ones)."""
    records = as_records(records)
    if not records:
        raise InputError("no results to report")
    ok = ok_records(records)
    sections = []

    measured = Section("Throughput and memory against batch size")
    for make in (plot_throughput_vs_batch, plot_memory_vs_batch):
        measured.parts.append(make(ok))
    sections.append(measured)

    techniques = Section("Speedup of each technique")
    tables = technique_speedups(ok)
    techniques.parts.append(plot_technique_speedups(tables))
    for technique, frame in tables.items():
        common, rows = display_rows(frame)
        techniques.parts.append(("text", describe_common(common)))
        techniques.parts.append(("table", rows))
    sections.append(techniques)

    gemm = Section("GEMM against the datasheet peak")
    gemm.parts.append(plot_gemm_vs_peak(ok))
    sections.append(gemm)

    devices = Section("Device ratios: measured beside datasheet")
    ratios = device_ratio_rows(ok)
    devices.parts.append(("table", ratios) if isinstance(ratios, list) else ("text", ratios))
    sections.append(devices)

    summary = Section("Results")
    summary.parts.append(("table", result_rows(records)))
    sections.append(summary)

    warnings = Section("Warnings")
    lines = warning_lines(records)
    warnings.parts.append(("list", lines) if lines else ("text", "No record carries a warning."))
    sections.append(warnings)
    return sections


def _overview(records: list[dict]) -> list[str]:
    from collections import Counter

    sessions = list(dict.fromkeys(r.get("session_id") for r in records))
    statuses = Counter(r.get("status") for r in records)
    frameworks = sorted({f"{r.get('backend')} {r.get('framework_version')}" for r in records if r.get("framework_version")})
    devices = sorted({_device_label(r) for r in records if r.get("device")})
    return [
        f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from {len(records)} result(s)"
        f" ({', '.join(f'{n} {s}' for s, n in statuses.most_common())}).",
        f"Sessions: {', '.join(map(str, sessions))}.",
        f"Frameworks: {', '.join(frameworks) or 'unknown'}. Devices: {', '.join(devices) or 'unknown'}.",
    ]


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1400px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
.skipped { color: #777; font-style: italic; }
figcaption { color: #555; font-size: 0.9em; }
"""


def render_html(sections: list[Section], overview: list[str]) -> str:
    """The report as one self-contained HTML page (plots as base64 PNG data URIs)."""
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'><title>harness report</title>",
           f"<style>{_CSS}</style></head><body>", "<h1>harness report</h1>"]
    out += [f"<p>{html.escape(line)}</p>" for line in overview]
    for section in sections:
        out.append(f"<h2>{html.escape(section.title)}</h2>")
        for part in section.parts:
            if isinstance(part, Plot):
                data = base64.b64encode(part.png).decode("ascii")
                out.append(f"<figure><img alt='{html.escape(part.title)}' src=\"data:image/png;base64,{data}\">"
                           f"<figcaption>{html.escape(part.caption)}</figcaption></figure>")
            elif isinstance(part, str):
                out.append(f"<p class='skipped'>{html.escape(part)}</p>")
            elif part[0] == "table":
                out.append(html_table(part[1]))
            elif part[0] == "list":
                out.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in part[1]) + "</ul>")
            else:
                out.append(f"<p>{html.escape(part[1])}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def render_markdown(sections: list[Section], overview: list[str]) -> str:
    """The report as Markdown linking the PNG files written beside it."""
    out = ["# harness report", ""] + [line + "  " for line in overview] + [""]
    for section in sections:
        out += [f"## {section.title}", ""]
        for part in section.parts:
            if isinstance(part, Plot):
                out += [f"![{part.title}]({part.slug}.png)", "", f"*{part.caption}*", ""]
            elif isinstance(part, str):
                out += [f"*{part}*", ""]
            elif part[0] == "table":
                out += [markdown_table(part[1]), ""]
            elif part[0] == "list":
                out += [f"- {line}" for line in part[1]] + [""]
            else:
                out += [part[1], ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write_report(records, output_dir: str | Path = "reports") -> dict[str, Path]:
    """Write report.html, report.md and the plots' PNG files into output_dir; the paths written."""
    records = as_records(records)
    sections = build_sections(records)
    overview = _overview(records)
    folder = Path(output_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--output {folder}: cannot create the folder: {exc}", field="--output") from None
    written: dict[str, Path] = {}
    for section in sections:
        for part in section.parts:
            if isinstance(part, Plot):
                path = folder / f"{part.slug}.png"
                path.write_bytes(part.png)
                written[part.slug] = path
    written["html"] = folder / "report.html"
    written["html"].write_text(render_html(sections, overview), encoding="utf-8")
    written["markdown"] = folder / "report.md"
    written["markdown"].write_text(render_markdown(sections, overview), encoding="utf-8")
    return written
