"""`harness report`: a self-contained HTML page and a Markdown file with plots of stored results.

The report answers the question harness exists for first: PyTorch against TensorFlow, like with
like (grouped bars per configuration, one colour per backend variant, the ratio written on each
bar, each framework's fastest configuration named). Then the runs that did not finish, with their
reasons; then each workload's own plots, drawn as the workload declares them (`Workload.plots`,
`x_param`, `metric`, `unit`); technique speedups against `technique_baselines`; device ratios beside
datasheet ratios; every result; every warning. No workload or technique is named in this module:
the workloads say what to draw.

Every plot says what varies in it and what is fixed. A bar or point is the median over the
configuration's processes (each worker process is one sample); its whisker is the bootstrap 95%
CI over processes, or, with one process, that process's CI over its timed blocks.

Plots are drawn with matplotlib's Agg canvas (no display, no pyplot state); the HTML embeds them as
base64 PNG data URIs, the Markdown links PNG files written beside it.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import io
import json
import textwrap
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InputError
from harness.machine.peaks import gpu_size, peak_tflops
from harness.present.table import summary_rows
from harness.results import stats
from harness.results.compare import (
    DATASHEET_COLUMNS,
    RESULT_COLUMNS,
    _alike,
    _match_key,
    as_records,
    backend_variant,
    compare,
    describe_common,
    describe_fastest,
    display_rows,
    fastest_configurations,
    is_difference,
    ok_records,
    process_value,
    technique_baselines,
    technique_speedups,
)
from harness.seam.backend import BUILTIN_BACKENDS, available_backends
from harness.workloads import WORKLOADS

GiB = 1024**3
#: Colours of backend variants, in the order the variants are first ranked (registry order, then name).
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
PEAK_COLOUR = "#d62728"
#: Units of neutral parameters whose workload does not declare one (Field(json_schema_extra={"unit": ...})).
PARAM_UNITS = {"image_size": "px"}
#: A table cell longer than this is shortened; HTML keeps the whole text in a <details> element.
CELL_CHARS = 90


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
    #: items: Plot, str (a skipped plot), ("table", rows[, cell limit]), ("text", str), ("list", [str])
    parts: list = field(default_factory=list)


# --------------------------------------------------------------------------- tables as text
def _cell(value) -> str:
    text = "-" if value is None else str(value)
    return text.replace("\n", " ")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "\u2026"


def markdown_table(rows: list[dict], limit: int | None = None) -> str:
    """Rows as a GitHub-flavoured Markdown table (columns in first-seen order, pipes escaped).

    `limit`: cells longer than that many characters are shortened with an ellipsis.
    """
    if not rows:
        return "(no rows)"
    columns = list(dict.fromkeys(k for r in rows for k in r))

    def esc(value) -> str:
        text = _cell(value)
        return (_short(text, limit) if limit else text).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(c) for c in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(esc(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


#: A cell at most this long never wraps (a figure, a name, an id); a longer one wraps between words.
NOWRAP_CHARS = 24


def _html_cell(value, limit: int) -> str:
    text = _cell(value)
    if len(text) <= NOWRAP_CHARS:
        return f"<td class='n'>{html.escape(text)}</td>"
    if len(text) <= limit:
        return f"<td>{html.escape(text)}</td>"
    full = html.escape(str(value))
    return (f"<td><details title=\"{html.escape(text, quote=True)}\"><summary>{html.escape(_short(text, limit))}"
            f"</summary><div class='full'>{full}</div></details></td>")


def _html_header(name) -> str:
    return html.escape(str(name)).replace("_", "_<wbr>")


def html_table(rows: list[dict], limit: int = CELL_CHARS) -> str:
    """Rows as an HTML table that fits the page: cells wrap, and a cell longer than `limit`
    characters shows its start, the whole text in a <details> element (and its title attribute)."""
    if not rows:
        return "<p>(no rows)</p>"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    head = "".join(f"<th>{_html_header(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(_html_cell(r.get(c), limit) for c in columns) + "</tr>" for r in rows)
    return f"<div class='table'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


# --------------------------------------------------------------------------- records: what varies, what is fixed
def _workload(name):
    return WORKLOADS.get(name)


def _shown(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "-" if value is None else str(value)


def _unit_of(workload: str | None, param: str) -> str | None:
    """The unit of a neutral parameter: the workload's declaration, else PARAM_UNITS."""
    spec = _workload(workload)
    found = spec.params_model.model_fields.get(param) if spec is not None else None
    extra = getattr(found, "json_schema_extra", None)
    if isinstance(extra, dict) and extra.get("unit"):
        return str(extra["unit"])
    return PARAM_UNITS.get(param)


def _setting(workload: str | None, param: str, value) -> str:
    unit = _unit_of(workload, param)
    return f"{param}={_shown(value)}" + (f" {unit}" if unit and value is not None else "")


def _device_label(record: dict) -> str:
    name, device = record.get("device_name"), record.get("device")
    return f"{name} ({device})" if name else str(device)


def _variant(record: dict) -> str:
    return backend_variant(record) or "?"


def _varying(records: list[dict], exclude: tuple[str, ...] = ()) -> list[str]:
    seen: dict[str, set] = {}
    for r in records:
        for k, v in (r.get("params") or {}).items():
            seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True, default=str))
    for r in records:  # a parameter only some records have varies too (None against a value)
        for k in seen:
            if k not in (r.get("params") or {}):
                seen[k].add("absent")
    return [k for k, values in seen.items() if len(values) > 1 and k not in exclude]


def _fixed(records: list[dict], exclude: tuple[str, ...] = ()) -> dict:
    varying = set(_varying(records))
    out: dict = {}
    for r in records:
        for k, v in (r.get("params") or {}).items():
            if k not in varying and k not in exclude and v is not None:  # an unset one says nothing
                out.setdefault(k, v)
    return out


def settings(records: list[dict], shown: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(what varies, what is fixed) among these records: backend variant, device and every parameter.

    `shown` names parameters a plot puts on an axis: they are listed as varying even at one value.
    """
    workload = next((r.get("workload") for r in records), None)
    variants = sorted({_variant(r) for r in records})
    devices = sorted({_device_label(r) for r in records})
    varies = (["backend"] if len(variants) > 1 else []) + (["device"] if len(devices) > 1 else [])
    varies += [p for p in shown if p not in varies]
    varies += [p for p in _varying(records) if p not in varies]
    fixed = (variants if len(variants) == 1 else []) + (devices if len(devices) == 1 else [])
    fixed += [_setting(workload, k, v) for k, v in _fixed(records, shown).items()]
    return varies, fixed


def describe_settings(records: list[dict], shown: tuple[str, ...] = ()) -> str:
    """What varies among these records and what is fixed, as one line:
    "varies: backend, batch_size; fixed: NVIDIA H200 (cuda:0), ..., image_size=224 px"."""
    varies, fixed = settings(records, shown)
    return f"varies: {', '.join(varies) or 'nothing'}; fixed: {', '.join(fixed) or 'nothing'}"


def _integral(value):
    """A float that holds an integer (a parameter pandas widened beside NaN) as that integer."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _versions(records: list[dict]) -> str:
    found = sorted({f"{r.get('backend')} {r.get('framework_version')}" for r in records if r.get("framework_version")})
    return ", ".join(found)


def variant_order(records: list[dict]) -> list[str]:
    """Every backend variant of the records: in the registry's backend order, then by name."""

    registry = list(available_backends())
    seen = dict.fromkeys(_variant(r) for r in records)

    def rank(variant: str):
        head = variant.split("[", 1)[0]
        return (registry.index(head) if head in registry else len(registry), variant)

    return sorted(seen, key=rank)


def variant_colours(records: list[dict]) -> dict[str, str]:
    """One colour per backend variant, the same in every plot of a report."""
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variant_order(records))}


def _not_probe(records: list[dict]) -> list[dict]:
    return [r for r in records if not r.get("probe_of")]


def _estimate(records: list[dict], value=None) -> tuple[float | None, float | None, float | None, int]:
    """(median over processes, CI low, CI high, processes) of a value per record (default the headline).

    With several processes the CI is the bootstrap over their values; with one, that record's own CI
    over its timed blocks (for the headline only).
    """
    values = [v for v in ((process_value(r) if value is None else value(r)) for r in records) if v is not None]
    if not values:
        return None, None, None, 0
    med = stats.median(values)
    if len(values) >= 2:
        low, high = stats.bootstrap_ci(values)
    elif value is None and records[0].get("ci_low") is not None and records[0].get("ci_high") is not None:
        low, high = records[0]["ci_low"], records[0]["ci_high"]
    else:
        low = high = None
    return med, low, high, len(values)


def _wrap(text: str, width: int = 110) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


# --------------------------------------------------------------------------- figures
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


def _title(ax, title: str, subtitle: str, width_in: float) -> None:
    """A bold title and, under it, what varies and what is fixed (wrapped to the figure's width); the
    title starts at the left edge of everything drawn (tick labels included), just above it."""
    chars = max(60, int(width_in * 15))
    ax.set_title(_wrap(subtitle, chars), loc="left", fontsize=8.5, color="#333")
    fig = ax.figure
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    fig.text(box.x0 / fig.get_figwidth(), box.y1 / fig.get_figheight() + 0.012, title, ha="left", va="bottom",
             fontsize=11.5, fontweight="bold")


def _legend_outside(ax, handles=None, labels=None) -> None:
    """The legend right of the axes, where it hides no data."""
    kwargs = dict(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    if handles is not None:
        ax.legend(handles, labels, **kwargs)
    else:
        ax.legend(**kwargs)


def _x_axis(ax, xs, name: str, workload: str | None) -> None:
    xs = sorted(set(xs))
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
    if numeric and len(xs) > 1 and min(xs) > 0 and xs[-1] / xs[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([_shown(x) for x in xs])
    unit = _unit_of(workload, name)
    ax.set_xlabel(name + (f" ({unit})" if unit else ""))


# --------------------------------------------------------------------------- grouped bars
@dataclass
class Group:
    """One configuration in a grouped bar chart: its label, ok records and unfinished records per variant."""

    label: str
    ok: dict = field(default_factory=dict)  # variant -> [record]
    other: dict = field(default_factory=dict)  # variant -> [record] (not ok)
    peak: float | None = None
    peak_label: str = ""


def _group_label(records: list[dict], varying: list[str], devices: bool, scenarios: bool) -> str:
    first = records[0]
    parts = []
    if devices:
        parts.append(_device_label(first))
    if scenarios:
        parts.append(str(first.get("scenario")))
    params = first.get("params") or {}
    parts += [_setting(first.get("workload"), p, params.get(p)) for p in varying]
    return "\n".join(parts) or "(one configuration)"


def configuration_groups(records: list[dict], min_variants: int = 1) -> list[Group]:
    """Records (of one workload and metric; every status) grouped by configuration, backend set free;
    only configurations that at least `min_variants` backend variants ran. Each group is labelled
    with the settings that differ among the groups kept.

    Two records share a group when they match as `harness compare --by backend` matches them.
    """
    keyed: dict[tuple, list[dict]] = {}
    for r in _not_probe(records):
        keyed.setdefault(_match_key(r, ["backend"]), []).append(r)
    kept = [members for members in keyed.values() if len({_variant(r) for r in members}) >= min_variants]
    records = [r for members in kept for r in members]
    varying = _varying(records)
    devices = len({_device_label(r) for r in records}) > 1
    scenarios = len({r.get("scenario") for r in records}) > 1
    groups = []
    for members in kept:
        group = Group(_group_label(members, varying, devices, scenarios))
        for r in members:
            (group.ok if r.get("status") == "ok" else group.other).setdefault(_variant(r), []).append(r)
        groups.append(group)
    return groups


def _short_verdict(verdict: str | None) -> str:
    if not verdict:
        return ""
    if is_difference(verdict):
        return verdict.split(":", 1)[0]
    return "inconclusive" if verdict.startswith("inconclusive") else "n.s."


def draw_grouped_bars(groups: list[Group], variants: list[str], colours: dict, *, value=None, unit: str,
                      title: str, subtitle: str, ratios: dict | None = None, y_label: str | None = None):
    """A figure of grouped bars: one group per configuration, one bar per backend variant (median,
    95% CI whisker), a status word where a variant's run did not finish, the datasheet peak of a
    group where known, and, given `ratios` ({(group index, variant): compare row}), each bar's ratio
    to its group's baseline written above it."""
    from matplotlib.patches import Patch

    present = [v for v in variants if any(v in g.ok or v in g.other for g in groups)]
    per = max(len(present), 1)
    width = 0.8 / per
    fig_w = min(18.0, max(9.0, len(groups) * (0.45 * per + 0.5) + 3.0))
    fig = _figure(fig_w, 5.2)
    ax = fig.add_subplot()
    tops = [0.0]
    for gi, group in enumerate(groups):
        for vi, variant in enumerate(present):
            x = gi - 0.4 + width * (vi + 0.5)
            if variant in group.ok:
                med, low, high, n = _estimate(group.ok[variant], value)
                if med is None:
                    continue
                err = None
                if low is not None and high is not None:
                    err = [[max(med - low, 0.0)], [max(high - med, 0.0)]]
                ax.bar(x, med, width * 0.92, yerr=err, color=colours[variant], capsize=3, ecolor="#222")
                top = max(med, high or med)
                tops.append(top)
                row = (ratios or {}).get((gi, variant))
                if row is not None and row.get("ratio") is not None:
                    strong = is_difference(row.get("verdict"))
                    busy = ", busy" if row.get("busy") else ""  # measured on a busy machine: see the table
                    text = f"{row['ratio']:.2f}\u00d7\n{_short_verdict(row.get('verdict'))}{busy}"
                    ax.annotate(text, (x, top), xytext=(0, 3), textcoords="offset points", ha="center",
                                va="bottom", fontsize=7.5, color="#000" if strong else "#777",
                                fontweight="bold" if strong else "normal")
                elif ratios is not None and row is None and len(group.ok) > 1:
                    ax.annotate("baseline", (x, top), xytext=(0, 3), textcoords="offset points", ha="center",
                                va="bottom", fontsize=7, color="#777")
                if group.peak:
                    ax.annotate(f"{100 * med / group.peak:.0f}%", (x, top), xytext=(0, 3), textcoords="offset points",
                                ha="center", va="bottom", fontsize=8.5)
            elif variant in group.other:
                statuses = Counter(r.get("status") for r in group.other[variant])
                word = ", ".join(str(s) for s, _ in statuses.most_common())
                ax.text(x, 0, f" {word}", rotation=90, ha="center", va="bottom", fontsize=9.5, color=colours[variant],
                        fontweight="bold")
        if group.peak:
            ax.plot([gi - 0.45, gi + 0.45], [group.peak, group.peak], color=PEAK_COLOUR, linewidth=2)
            tops.append(group.peak)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g.label for g in groups], fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, max(tops) * 1.22 or 1.0)
    ax.set_ylabel(y_label or unit)
    ax.grid(True, axis="y", alpha=0.3)
    handles = [Patch(color=colours[v]) for v in present]
    labels = list(present)
    if any(g.peak for g in groups):
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color=PEAK_COLOUR, linewidth=2))
        labels.append("datasheet peak")
    _legend_outside(ax, handles, labels)
    _title(ax, title, subtitle, fig_w)
    return fig


# --------------------------------------------------------------------------- the framework comparison
def _baseline(variants: list[str], group: Group) -> str | None:
    return next((v for v in variants if v in group.ok), None)


def _group_ratios(groups: list[Group], variants: list[str]) -> tuple[dict, list[dict]]:
    """({(group index, variant): compare row}, every compare row) against each group's baseline variant."""
    ratios, rows = {}, []
    for gi, group in enumerate(groups):
        if len(group.ok) < 2:
            continue
        base = _baseline(variants, group)
        try:
            table = compare([r for rs in group.ok.values() for r in rs], ["backend"], baseline=base)
        except InputError:
            continue
        for row in table.to_dict(orient="records"):
            ratios[(gi, row["value"])] = row
            rows.append(row)
    return ratios, rows


def _metric_sets(records: list[dict]) -> list[tuple[str, str, list[dict]]]:
    """(workload, metric, records) for each workload and metric the records hold (every status)."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        metric = r.get("metric") or getattr(_workload(r.get("workload")), "metric", None)
        out.setdefault((r.get("workload"), metric), []).append(r)
    return [(w, m, rs) for (w, m), rs in out.items()]


def framework_section(records: list[dict], colours: dict) -> Section:
    """PyTorch against TensorFlow (every backend variant): grouped bars per configuration, the
    ratio on each bar, the comparison table, and each variant's fastest configuration."""

    records = _not_probe(records)
    variants = list(colours)
    others = sorted({str(r.get("backend")) for r in records} - set(BUILTIN_BACKENDS))
    section = Section("PyTorch vs TensorFlow" + (f" (and {', '.join(others)})" if others else ""))
    for workload, metric, subset in _metric_sets(records):
        spec = _workload(workload)
        mine = [v for v in variants if any(_variant(r) == v for r in subset)]
        headline = spec is None or metric == spec.metric  # not a capacity search's max_batch_size
        lines = describe_fastest(fastest_configurations(subset)) if headline else []
        label = workload if headline else f"{workload} ({metric})"  # a capacity search's answers, not its rate
        if len(mine) < 2:
            section.parts.append(("text", f"{label}: only {', '.join(mine)} measured here; nothing to compare it "
                                          "with (`harness run frameworks` measures both frameworks, like with like)."))
            section.parts.append(("list", lines))
            continue
        groups = configuration_groups(subset, min_variants=2)
        if not groups:
            section.parts.append(("text", f"{label}: {', '.join(mine)} were measured, but never under the same "
                                          "settings: nothing to compare like with like."))
            section.parts.append(("list", lines))
            continue
        ratios, rows = _group_ratios(groups, variants)
        unit = next((r.get("unit") for r in subset if r.get("unit")), "") or ""
        shown = [r for g in groups for rs in list(g.ok.values()) + list(g.other.values()) for r in rs]
        name = workload if headline else f"{workload}_{metric}"
        fig = draw_grouped_bars(groups, variants, colours, unit=unit, ratios=ratios,
                                title=f"{workload}: {metric} by backend, per configuration (median, 95% CI)",
                                subtitle=describe_settings(shown), y_label=f"{metric} ({unit})")
        bases = sorted({_baseline(variants, g) for g in groups if len(g.ok) > 1} - {None})
        caption = (f"Each bar is the median {metric} over that configuration's processes, its whisker the bootstrap "
                   "95% CI over processes (one process: over its timed blocks). Above each bar: its ratio to "
                   f"{' / '.join(bases) or 'the baseline'} in the same configuration and the verdict of "
                   "`harness compare --by backend` (bold: a difference; n.s.: no difference found; inconclusive: "
                   "too few processes; busy: measured on a busy machine). A status word in place of a bar: that "
                   "run did not finish (see below). "
                   f"Frameworks: {_versions(shown)}. {_sentence(describe_settings(shown))}.")
        section.parts.append(Plot(f"frameworks_{name}", f"{workload}: backends compared", _png(fig), caption))
        section.parts.append(("list", lines))
        if rows:
            common, display = display_rows(rows)
            section.parts.append(("text", describe_common(common)))
            section.parts.append(("table", display))
    return section


# --------------------------------------------------------------------------- runs that did not finish
def unfinished_rows(records: list[dict]) -> list[dict]:
    """One row per configuration and reason of every run that did not end ok (capacity probes left
    out): workload, backend, device, the settings that set it apart, status, processes, reason."""
    records = _not_probe(records)
    bad = [r for r in records if r.get("status") not in ("ok", None)]
    grouped: dict[tuple, list[dict]] = {}
    for r in bad:
        first = str(r.get("error") or "").strip().splitlines()
        key = (r.get("workload"), _variant(r), _device_label(r), json.dumps(r.get("params") or {}, sort_keys=True,
               default=str), r.get("status"), first[0] if first else "")
        grouped.setdefault(key, []).append(r)
    rows = []
    for (workload, variant, device, _, status, _reason), members in grouped.items():
        same = [r for r in records if r.get("workload") == workload]
        params = members[0].get("params") or {}
        settings = ", ".join(_setting(workload, p, params.get(p)) for p in _varying(same))
        total = sum(1 for r in same if _variant(r) == variant and r.get("params") == members[0].get("params")
                    and _device_label(r) == device)
        rows.append({"workload": workload, "backend": variant, "device": device, "settings": settings or "-",
                     "status": status, "processes": f"{len(members)} of {total}",
                     "reason": str(members[0].get("error") or "(no reason recorded)")})
    return rows


def unfinished_section(records: list[dict], sessions: list[dict] | None = None) -> Section:
    """Runs that ended other than ok, and sessions that ended before their plan did (`sessions`: from
    harness.commands.report.unfinished_sessions), whose missing runs left no record at all."""
    section = Section("Runs that did not finish")
    rows = unfinished_rows(records)
    probes = [r for r in records if r.get("probe_of")]
    for s in sessions or []:
        if s.get("left"):
            section.parts.append(("text", (
                f"Session {s['session_id']} ended {s.get('state')}: {s['left']} of its {s['planned']} planned "
                f"{s.get('what', 'run(s)')} have no ok result (a run stopped part-way leaves no record). "
                f"`harness run --resume {s['session_id']}` runs them.")))
    if rows:
        section.parts.append(("text", f"{len(rows)} configuration(s) with runs that ended other than ok "
                                      "(unsupported: the backend cannot run it, and says why; failed, timeout, "
                                      "oom, diverged: it ran and did not finish). They are in no plot's bars."))
        section.parts.append(("table", rows, 2 * CELL_CHARS))  # a reason's first lines, whole
    elif any(s.get("left") for s in sessions or []):
        section.parts.append(("text", "Every stored run ended ok."))
    else:
        section.parts.append(("text", "Every run ended ok."))
    if probes:
        section.parts.append(("text", f"{len(probes)} capacity probe(s) of --find-max-batch are not listed: an "
                                      "out-of-memory probe is how the search finds the limit."))
    return section


# --------------------------------------------------------------------------- each workload's own plots
def _lines(records: list[dict], x_param: str, colours: dict) -> tuple[dict, str]:
    """Records of one workload grouped into lines keyed by x_param: {(variant, rest): {x: [records]}},
    and a note naming the usual value of each other varying setting, which line labels leave out."""
    others = _varying(records, (x_param,))
    devices = len({_device_label(r) for r in records}) > 1
    usual = {p: Counter(json.dumps((r.get("params") or {}).get(p), default=str) for r in records).most_common(1)[0][0]
             for p in others}
    lines: dict[tuple, dict] = {}
    workload = next((r.get("workload") for r in records), None)
    for r in records:
        params = r.get("params") or {}
        x = params.get(x_param)
        if x is None:
            continue
        rest = ([_device_label(r)] if devices else []) + [
            _setting(workload, p, params.get(p)) for p in others
            if json.dumps(params.get(p), default=str) != usual[p]]
        lines.setdefault((_variant(r), ", ".join(rest)), {}).setdefault(x, []).append(r)
    note = ""
    if others:
        values = [_setting(workload, p, json.loads(usual[p])) for p in others]
        note = " Lines not labelled otherwise have " + ", ".join(values) + "."
    order = {v: i for i, v in enumerate(colours)}
    lines = dict(sorted(lines.items(), key=lambda item: (order.get(item[0][0], 99), item[0][1])))
    return lines, note


def _line_plot(records: list[dict], spec, colours: dict, *, value, y_label: str, title: str, caption: str,
               slug: str, error_bars: bool, from_zero: bool, everything: list[dict]) -> Plot | str:
    x_param = spec.x_param
    lines, note = _lines(records, x_param, colours)
    if not lines:
        return f"No {spec.name} results with a value: {title.lower()} skipped."
    styles, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D", "v", "P", "X"]
    rests = list(dict.fromkeys(rest for _, rest in lines))
    here = list(dict.fromkeys(variant for variant, _ in lines))
    single = len(here) == 1  # one backend variant: a colour per configuration instead
    fig_w = 8.5
    fig = _figure(fig_w, 4.8)
    ax = fig.add_subplot()
    for (variant, rest), points in lines.items():
        xs = sorted(points)
        meds, lows, highs = [], [], []
        for x in xs:
            med, low, high, _ = _estimate(points[x], value)
            meds.append(med)
            lows.append(0.0 if low is None else max(med - low, 0.0))
            highs.append(0.0 if high is None else max(high - med, 0.0))
        i, vi = rests.index(rest), here.index(variant)
        label = variant + (f", {rest}" if rest else "")
        if single:
            kwargs = dict(color=PALETTE[i % len(PALETTE)], linestyle=styles[(i // len(PALETTE)) % len(styles)],
                          marker=markers[i % len(markers)], markersize=6)
        else:  # later variants drawn smaller, so a line that coincides with an earlier one still shows
            kwargs = dict(color=colours.get(variant, "#333"), linestyle=styles[i % len(styles)],
                          marker=markers[i % len(markers)], markersize=max(8.5 - 1.5 * vi, 3.5))
        kwargs["label"] = label
        if error_bars:
            ax.errorbar(xs, meds, yerr=[lows, highs], capsize=3, **kwargs)
        else:
            ax.plot(xs, meds, **kwargs)
    _x_axis(ax, [x for p in lines.values() for x in p], x_param, spec.name)
    ax.set_ylabel(y_label)
    if from_zero:
        ax.set_ylim(bottom=0, top=max(ax.get_ylim()[1], 1e-9) * 1.05)
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    described = describe_settings(records, (x_param,))
    _title(ax, title, described, fig_w)
    caption += (" One colour per configuration (one backend variant)." if single
                else " One colour per backend variant, one line style per other setting.")
    if any(r.get("status") not in ("ok", None) for r in everything):
        caption += " Runs that did not finish are not drawn (see Runs that did not finish)."
    return Plot(slug, title, _png(fig), f"{caption}{note} Frameworks: {_versions(records)}. {_sentence(described)}.")


def plot_metric_vs_x(records: list[dict], spec, colours: dict) -> Plot | str:
    """The workload's headline (median over processes, 95% CI) against its x_param, one line per
    backend variant and other varying setting; or why it is skipped."""
    if not spec.x_param:
        return f"The workload {spec.name} names no parameter to draw {spec.metric} against: plot skipped."
    mine = [r for r in ok_records(records) if r.get("workload") == spec.name and r.get("metric") in (spec.metric, None)]
    if not mine:
        return f"No {spec.name} results with status ok: {spec.metric} against {spec.x_param} skipped."
    return _line_plot(
        mine, spec, colours, value=None, y_label=f"{spec.metric} ({spec.unit})",
        title=f"{spec.name}: {spec.metric} against {spec.x_param} (median, 95% CI)",
        caption=(f"Median {spec.unit} over each configuration's processes; error bars are the bootstrap 95% CI "
                 "over processes (one process: over its timed blocks)."),
        slug=f"{spec.name}_{spec.metric}_vs_{spec.x_param}", error_bars=True, from_zero=True,
        everything=_not_probe([r for r in records if r.get("workload") == spec.name]))


def plot_memory_vs_x(records: list[dict], spec, colours: dict) -> Plot | str:
    """The framework allocator's peak against the workload's x_param, from zero; or why it is skipped."""
    if not spec.x_param:
        return f"The workload {spec.name} names no parameter to draw memory against: plot skipped."
    mine = [r for r in ok_records(records) if r.get("workload") == spec.name and r.get("metric") in (spec.metric, None)]
    with_memory = [r for r in mine if r.get("peak_allocated_bytes") is not None]
    if not with_memory:
        return f"No {spec.name} results with a peak allocated memory: memory against {spec.x_param} skipped."
    missing = sorted({f"{_variant(r)} on {_device_label(r)}" for r in mine} -
                     {f"{_variant(r)} on {_device_label(r)}" for r in with_memory})
    caption = ("The framework allocator's peak over the measured steps (not NVML's device memory used), median "
               "over processes; the axis starts at zero.")
    if missing:
        caption += " No allocator peak recorded for: " + "; ".join(missing) + "."
    return _line_plot(
        with_memory, spec, colours, value=lambda r: r["peak_allocated_bytes"] / GiB, y_label="peak allocated (GiB)",
        title=f"{spec.name}: peak allocated memory against {spec.x_param}",
        caption=caption, slug=f"{spec.name}_memory_vs_{spec.x_param}", error_bars=False, from_zero=True,
        everything=_not_probe([r for r in records if r.get("workload") == spec.name]))


def _peak(record: dict, spec) -> tuple[float | None, str]:
    """(dense datasheet peak TFLOP/s of the record's device at the workload's precision, "device precision")."""

    try:
        precision = spec.peak_precision(spec.validate(record.get("params") or {}))
    except Exception:  # parameters of another version: no peak rather than a guess
        return None, f"{_device_label(record)}"
    what = f"{record.get('device_name') or record.get('device')} {precision}"
    if not str(record.get("device") or "").startswith("cuda:"):
        return None, what
    return peak_tflops(record.get("device_name"), precision, **gpu_size(record)), what


def plot_tflops_vs_peak(records: list[dict], spec, colours: dict) -> Plot | str:
    """Achieved TFLOP/s per configuration and backend variant, with the device's dense datasheet peak
    for the workload's precision drawn where it is known; or why it is skipped."""
    mine = [r for r in _not_probe(records) if r.get("workload") == spec.name and r.get("metric") in (spec.metric, None)]
    if not any(r.get("status") == "ok" for r in mine):
        return f"No {spec.name} results with status ok: TFLOP/s against the datasheet peak skipped."
    groups = configuration_groups(mine)
    missing = []
    for group in groups:
        first = next(iter(group.ok.values()), None) or next(iter(group.other.values()))
        group.peak, what = _peak(first[0], spec)
        if not group.peak:
            missing.append(what)
    known = any(g.peak for g in groups)
    value = lambda r: r["tflops"] if r.get("tflops") is not None else r.get("median")  # noqa: E731
    title = f"{spec.name}: achieved TFLOP/s" + (" against the datasheet peak" if known else "")
    described = describe_settings(mine)
    fig = draw_grouped_bars(groups, list(colours), colours, value=value, unit="TFLOP/s", title=title,
                            subtitle=described, y_label="TFLOP/s")
    caption = f"Median achieved TFLOP/s over processes, 95% CI whiskers. {_sentence(described)}."
    if known:
        caption += (" The red line is the device's dense datasheet peak for that precision; the label, the percent "
                    "of it.")
    if missing:
        caption += " No datasheet figure for: " + ", ".join(sorted(set(missing))) + "."
    return Plot(f"{spec.name}_tflops_vs_peak", title, _png(fig), caption)


#: Each plot kind a workload may declare (`Workload.plots`) and what draws it.
PLOT_KINDS = {
    "throughput_vs_x": plot_metric_vs_x,
    "memory_vs_x": plot_memory_vs_x,
    "tflops_vs_peak": plot_tflops_vs_peak,
}


def workload_section(name: str, records: list[dict], colours: dict) -> Section:
    spec = _workload(name)
    section = Section(f"{name}: {spec.description}" if spec is not None else str(name))
    if spec is None or not spec.plots:
        section.parts.append(f"The workload {name} declares no plots.")
        return section
    for kind in spec.plots:
        draw = PLOT_KINDS.get(kind)
        section.parts.append(draw(records, spec, colours) if draw
                             else f"Plot kind {kind!r} is not drawn by this version.")
    return section


# --------------------------------------------------------------------------- technique speedups
def _row_variant(row: dict) -> str:
    options = row.get("options")
    if isinstance(options, str):
        try:
            options = json.loads(options)
        except ValueError:
            options = None
    backend = str(row.get("backend"))
    if isinstance(options, dict) and options:
        return f"{backend}[{','.join(f'{k}={v}' for k, v in sorted(options.items()))}]"
    return backend


def plot_technique_speedups(tables: dict, colours: dict | None = None) -> Plot | str:
    """Ratio of each technique value to its baseline value (95% CI), one colour per backend variant."""
    rows = [r for frame in tables.values() for r in frame.to_dict(orient="records")]
    if not rows:
        return (f"No technique ({', '.join(technique_baselines())}) was measured at two values under otherwise "
                "equal settings: technique speedups skipped.")
    colours = dict(colours or {})
    result = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS)
    context = list(dict.fromkeys(c for r in rows for c in r if c not in result and c not in technique_baselines()))

    def present(value) -> bool:
        return value is not None and value == value  # NaN: a column another workload has

    # within each workload, only the settings that differ between its bars label them
    varying: dict[str, list[str]] = {}
    for workload in dict.fromkeys(r.get("workload") for r in rows):
        group = [r for r in rows if r.get("workload") == workload]
        varying[workload] = [c for c in context if c not in ("backend", "workload", "options")
                             and len({_shown(r.get(c)) for r in group if present(r.get(c))}) > 1]
    several = len(varying) > 1
    labels = []
    for r in rows:
        parts = [f"{r['compared']} {r['value']} vs {r['baseline']}", _row_variant(r)]
        parts += [str(r.get("workload"))] if several else []
        parts += [_setting(r.get("workload"), c, r.get(c)) for c in varying[r.get("workload")] if present(r.get(c))]
        labels.append(" | ".join(parts))
    fig_w = 10.0
    fig = _figure(fig_w, max(2.8, 0.42 * len(rows) + 1.8))
    ax = fig.add_subplot()
    seen = []
    for i, r in enumerate(rows):
        variant = _row_variant(r)
        colour = colours.setdefault(variant, PALETTE[len(colours) % len(PALETTE)])
        ratio = r["ratio"]
        if ratio is None or r.get("ratio_ci_low") is None or r["ratio_ci_low"] != r["ratio_ci_low"]:
            if ratio is not None and ratio == ratio:
                ax.barh(i, ratio, color=colour, alpha=0.35)
            continue
        err = [[max(ratio - r["ratio_ci_low"], 0)], [max(r["ratio_ci_high"] - ratio, 0)]]
        significant = is_difference(r["verdict"])
        ax.barh(i, ratio, xerr=err, color=colour, alpha=0.9 if significant else 0.35, capsize=3,
                label=variant if variant not in seen else None)
        seen.append(variant)
        note = f"{r['change_pct']:+.1f}%"
        if not significant:
            note += f" ({_short_verdict(r['verdict'])}, {r['baseline_runs']} vs {r['value_runs']})"
        ax.text(r["ratio_ci_high"], i, " " + note, va="center", fontsize="small")
    ax.axvline(1.0, color="black", linewidth=1)
    def present_(value) -> bool:
        return value is not None and value == value

    highs = [r["ratio_ci_high"] for r in rows if present_(r.get("ratio_ci_high"))]
    highs += [r["ratio"] for r in rows if present_(r.get("ratio"))]
    quiet = any(not is_difference(r.get("verdict")) for r in rows)
    ax.set_xlim(0, max(highs + [1.0]) * (1.45 if quiet else 1.2))  # room for the labels
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("ratio to baseline (higher is faster)")
    ax.grid(True, axis="x", alpha=0.3)
    if seen:
        _legend_outside(ax)
    baselines = ", ".join(f"{k}={v}" for k, v in technique_baselines().items())
    records_context = "; ".join(f"{w}: {', '.join(v) + ' vary' if v else 'nothing else varies'}"
                                for w, v in varying.items())
    _title(ax, "Speedup of each technique against its baseline (95% CI; pale: no verdict)",
           f"varies: the technique, backend; {records_context}; baselines: {baselines}", fig_w)
    return Plot("technique_speedups", "Speedup of each technique", _png(fig),
                "Ratio of medians over processes with a bootstrap 95% CI; a pale bar has no verdict: n.s. (no "
                "difference found) or inconclusive (too few processes for any verdict), with the processes per "
                "side. Baselines: " + baselines + ".")


def technique_section(records: list[dict], colours: dict) -> Section:
    section = Section("Speedup of each technique")
    tables = technique_speedups(records)
    section.parts.append(plot_technique_speedups(tables, colours))
    for technique, frame in tables.items():
        for workload in dict.fromkeys(frame["workload"]) if "workload" in frame else [None]:
            part = frame if workload is None else frame[frame["workload"] == workload].dropna(axis=1, how="all")
            rows = [{k: _integral(v) for k, v in row.items()} for row in part.to_dict(orient="records")]
            common, rows = display_rows(rows)
            section.parts.append(("text", describe_common(common)))
            section.parts.append(("table", rows))
    return section


def scaling_section(records: list[dict]) -> Section | None:
    """Data-parallel scaling (docs/distributed.md): each configuration against itself at fewer replicas,
    with its scaling efficiency; None when no record ran more than one replica."""

    section = Section("Data-parallel scaling")
    for workload in dict.fromkeys(r.get("workload") for r in records):
        name = getattr(WORKLOADS.get(workload), "replicas_param", None)
        mine = [r for r in records if r.get("workload") == workload]
        if not name or len({int(r.get("replicas") or 1) for r in mine}) < 2:
            continue
        try:
            table = compare(mine, [name])
        except InputError:
            continue
        common, rows = display_rows(table)
        section.parts.append(("text", describe_common(common) + ". Scaling efficiency: global rate at R replicas / "
                              "(R x the rate at the baseline's replicas / its replicas)."))
        section.parts.append(("table", [{k: v for k, v in r.items() if k != "warnings"} for r in rows]))
    return section if section.parts else None


# --------------------------------------------------------------------------- the rest
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
    """The results summary table (harness.present.table's rows), backend variants named, led by workload,
    device name and session where they vary."""

    lead = [f for f in ("workload", "device_name", "session_id") if len({r.get(f) for r in records}) > 1]
    rows = []
    for record, row in zip(records, summary_rows(records)):
        if "backend" in row:
            row["backend"] = _variant(record)
        rows.append({**{f: record.get(f) for f in lead}, **row})
    return rows


def results_section(records: list[dict]) -> Section:
    """A table per workload, one row per result; what every row shares is said once above it."""
    section = Section("Results")
    for workload in dict.fromkeys(r.get("workload") for r in records):
        mine = [r for r in records if r.get("workload") == workload]
        _, fixed = settings(mine)
        rows = result_rows(mine)
        same = [c for c in dict.fromkeys(k for row in rows for k in row)
                if len(rows) > 1 and len({_cell(row.get(c)) for row in rows}) == 1 and c != "backend"]
        fixed += [f"{c} {_cell(rows[0].get(c))}" for c in same if _cell(rows[0].get(c)) not in ("", "-")
                  and f"({_cell(rows[0].get(c))})" not in " ".join(fixed)]  # the device, said already
        fixed += [f"no {c}" for c in same if _cell(rows[0].get(c)) == "-"]
        rows = [{k: v for k, v in row.items() if k not in same} for row in rows]
        section.parts.append(("text", f"{workload}, {len(mine)} result(s); every row: {', '.join(fixed) or '-'}."))
        section.parts.append(("table", rows))
    return section


def _record_label(record: dict, params: list[str]) -> str:
    parts = [str(record.get("workload")), _variant(record), _device_label(record)]
    values = record.get("params") or {}
    parts += [_setting(record.get("workload"), p, values[p]) for p in params if values.get(p) is not None]
    return " ".join(parts)


def warning_lines(records: list[dict]) -> list[str]:
    """Every record's warnings and the error of every record that is not ok, one line per
    configuration and kind (texts that differ only in their figures told once, with a count)."""
    varying = {w: _varying([r for r in records if r.get("workload") == w])
               for w in {r.get("workload") for r in records}}
    per_label: dict[str, list[dict]] = {}
    for r in records:
        per_label.setdefault(_record_label(r, varying[r.get("workload")]), []).append(r)
    out = []
    for label, members in per_label.items():
        texts = []
        for r in members:
            if r.get("status") not in ("ok", None):
                error = str(r.get("error") or "").strip().splitlines()
                texts.append(f"status {r['status']}" + (f": {error[0][:200]}" if error else ""))
            texts += list(dict.fromkeys(str(w) for w in r.get("warnings") or []))
        out += [f"{label}: {text}" for text in _alike(texts, len(members))]
    return out


def build_sections(records, sessions: list[dict] | None = None) -> list[Section]:
    """The report's sections, in order, from result records (all statuses; plots use only ok ones) and the
    unfinished sessions they came from (see unfinished_section)."""
    records = as_records(records)
    if not records:
        raise InputError("no results to report")
    colours = variant_colours(_not_probe(records) or records)
    sections = [framework_section(records, colours), unfinished_section(records, sessions)]
    for name in dict.fromkeys(r.get("workload") for r in records):
        sections.append(workload_section(name, [r for r in records if r.get("workload") == name], colours))
    sections.append(technique_section(ok_records(records), colours))
    scaling = scaling_section(ok_records(records))
    if scaling is not None:
        sections.append(scaling)

    devices = Section("Device ratios: measured beside datasheet")
    ratios = device_ratio_rows(ok_records(records))
    devices.parts.append(("table", ratios) if isinstance(ratios, list) else ("text", ratios))
    sections.append(devices)

    sections.append(results_section(records))

    warnings = Section("Warnings")
    lines = warning_lines(records)
    warnings.parts.append(("list", lines) if lines else ("text", "No record carries a warning."))
    sections.append(warnings)
    return sections


def _overview(records: list[dict]) -> list[str]:
    sessions = list(dict.fromkeys(r.get("session_id") for r in records))
    statuses = Counter(r.get("status") for r in records)
    devices = sorted({_device_label(r) for r in records if r.get("device")})
    return [
        f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from {len(records)} result(s)"
        f" ({', '.join(f'{n} {s}' for s, n in statuses.most_common())}).",
        f"Sessions: {', '.join(map(str, sessions))}.",
        f"Frameworks: {_versions(records) or 'unknown'}. Devices: {', '.join(devices) or 'unknown'}.",
    ]


_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; padding: 0 1em; max-width: 1400px; color: #222; }
.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 1.2em; font-size: 0.8em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.45em; text-align: left; vertical-align: top;
         overflow-wrap: break-word; }
th { background: #f3f3f3; }
td { max-width: 30em; }
td.n { white-space: nowrap; }
details summary { cursor: pointer; }
details .full { white-space: pre-wrap; margin-top: 0.3em; }
img { max-width: 100%; border: 1px solid #eee; }
figure { margin: 1em 0; }
.skipped { color: #777; font-style: italic; }
figcaption { color: #555; font-size: 0.9em; max-width: 70em; }
li { margin: 0.15em 0; overflow-wrap: anywhere; }
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
                out.append(html_table(part[1], *part[2:]))
            elif part[0] == "list":
                if part[1]:
                    out.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in part[1]) + "</ul>")
            else:
                out.append(f"<p>{html.escape(part[1])}</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def render_markdown(sections: list[Section], overview: list[str]) -> str:
    """The report as Markdown linking the PNG files written beside it (long cells shortened; the
    Warnings section and report.html hold every text in full)."""
    out = ["# harness report", ""] + [line + "  " for line in overview] + [""]
    for section in sections:
        out += [f"## {section.title}", ""]
        for part in section.parts:
            if isinstance(part, Plot):
                out += [f"![{part.title}]({part.slug}.png)", "", f"*{part.caption}*", ""]
            elif isinstance(part, str):
                out += [f"*{part}*", ""]
            elif part[0] == "table":
                out += [markdown_table(part[1], limit=2 * CELL_CHARS), ""]
            elif part[0] == "list":
                if part[1]:
                    out += [f"- {line}" for line in part[1]] + [""]
            else:
                out += [part[1], ""]
    return "\n".join(out).rstrip("\n") + "\n"


def write_report(records, output_dir: str | Path = "reports", sessions: list[dict] | None = None) -> dict[str, Path]:
    """Write report.html, report.md and the plots' PNG files into output_dir; the paths written."""
    records = as_records(records)
    sections = build_sections(records, sessions)
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
