"""The report's bar charts: a metric by backend variant per configuration, each bar's ratio to its group's
baseline and verdict above it; achieved TFLOP/s against the datasheet peak; and each technique's speedup against
its baseline. A bar is the median over the configuration's processes (each worker process is one sample); its
whisker the bootstrap 95% CI over processes, or, with one process, that process's CI over its timed blocks."""

from __future__ import annotations

from collections import Counter

from harness.present.report import canvas
from harness.present.report.page import Plot
from harness.present.report.shaping import (
    PALETTE,
    Group,
    axis_label,
    configuration_groups,
    describe_settings,
    device_peak,
    estimate,
    group_baseline,
    not_probes,
    present,
    row_variant,
    sentence,
    short_verdict,
    speedup_labels,
    versions,
)
from harness.results.compare import ComparisonRow, is_difference, technique_baselines
from harness.results.record import Result

PEAK_COLOUR = "#d62728"


def _annotate(ax, x: float, top: float, text: str, **style) -> None:
    ax.annotate(text, (x, top), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", **style)


#: Words of a compare row's warnings saying that one side ran a mode not meant for speed (TensorFlow eager,
#: its debugging mode), so the pair is not like for like: the chart says so on the bar itself.
NOT_LIKE_FOR_LIKE = ("debugging mode",)


def not_like_for_like(row: ComparisonRow | None) -> bool:
    """Whether a compare row's warnings say its two sides ran modes that are not like for like."""
    warnings = str(row.warnings or "") if row is not None else ""
    return any(words in warnings for words in NOT_LIKE_FOR_LIKE)


def _ratio_label(ax, x: float, top: float, row: ComparisonRow | None, ratios: dict | None, several: bool) -> None:
    """Above a bar: its ratio to the group's baseline and the verdict (and `not like for like` where a
    side ran a mode not meant for speed), or `baseline` on the baseline's bar."""
    if row is not None and row.ratio is not None:
        strong = is_difference(row.verdict) and not not_like_for_like(row)
        busy = ", busy" if row.busy else ""  # measured on a busy machine: see the table
        caveat = "\nnot like for like" if not_like_for_like(row) else ""
        text = f"{row.ratio:.2f}\u00d7\n{short_verdict(row.verdict)}{busy}{caveat}"
        _annotate(ax, x, top, text, fontsize=7.5, color="#000" if strong else "#777",
                  fontweight="bold" if strong else "normal")
    elif ratios is not None and row is None and several:
        _annotate(ax, x, top, "baseline", fontsize=7, color="#777")


def _bar(ax, x: float, width: float, group: Group, variant: str, colour: str, value, row: ComparisonRow | None,
         ratios: dict | None) -> float | None:
    """One variant's bar of a group (median, CI whisker, labels above it); its top, or None where nothing is drawn."""
    med, low, high, n = estimate(group.ok[variant], value)
    if med is None:
        return None
    err = None
    if low is not None and high is not None:
        err = [[max(med - low, 0.0)], [max(high - med, 0.0)]]
    ax.bar(x, med, width * 0.92, yerr=err, color=colour, capsize=3, ecolor="#222")
    top = max(med, high or med)
    _ratio_label(ax, x, top, row, ratios, len(group.ok) > 1)
    if group.peak:
        _annotate(ax, x, top, f"{100 * med / group.peak:.0f}%", fontsize=8.5)
    return top


def _status_word(ax, x: float, records: list[Result], colour: str) -> None:
    """In place of a bar: how the variant's runs ended."""
    statuses = Counter(r.status for r in records)
    word = ", ".join(str(s) for s, _ in statuses.most_common())
    ax.text(x, 0, f" {word}", rotation=90, ha="center", va="bottom", fontsize=9.5, color=colour, fontweight="bold")


def _bars_legend(ax, present: list[str], colours: dict, peaks: bool) -> None:
    # deferred on purpose: matplotlib is slow to import, and `harness compare` imports this package for its tables
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=colours[v]) for v in present]
    labels = list(present)
    if peaks:
        handles.append(Line2D([], [], color=PEAK_COLOUR, linewidth=2))
        labels.append("datasheet peak")
    canvas.legend_outside(ax, handles, labels)


def draw_grouped_bars(groups: list[Group], variants: list[str], colours: dict, *, value=None, unit: str,
                      title: str, subtitle: str, ratios: dict | None = None, y_label: str | None = None):
    """A figure of grouped bars: one group per configuration, one bar per backend variant (median,
    95% CI whisker), a status word where a variant's run did not finish, the datasheet peak of a
    group where known, and, given `ratios` ({(group index, variant): compare row}), each bar's ratio
    to its group's baseline written above it."""
    present = [v for v in variants if any(v in g.ok or v in g.other for g in groups)]
    per = max(len(present), 1)
    width = 0.8 / per
    fig_w = min(18.0, max(9.0, len(groups) * (0.45 * per + 0.5) + 3.0))
    fig = canvas.figure(fig_w, 5.2)
    ax = fig.add_subplot()
    tops = [0.0]
    for gi, group in enumerate(groups):
        for vi, variant in enumerate(present):
            x = gi - 0.4 + width * (vi + 0.5)
            if variant in group.ok:
                row = (ratios or {}).get((gi, variant))
                top = _bar(ax, x, width, group, variant, colours[variant], value, row, ratios)
                if top is not None:
                    tops.append(top)
            elif variant in group.other:
                _status_word(ax, x, group.other[variant], colours[variant])
        if group.peak:
            ax.plot([gi - 0.45, gi + 0.45], [group.peak, group.peak], color=PEAK_COLOUR, linewidth=2)
            tops.append(group.peak)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g.label for g in groups], fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, max(tops) * 1.22 or 1.0)
    ax.set_ylabel(y_label or unit)
    ax.grid(True, axis="y", alpha=0.3)
    _bars_legend(ax, present, colours, any(g.peak for g in groups))
    canvas.title(ax, title, subtitle, fig_w)
    return fig


def plot_frameworks(subset: list[Result], groups: list[Group], ratios: dict, colours: dict, *, metric: str,
                    headline: bool) -> Plot:
    """One workload's metric by backend variant, per configuration (`groups`), each bar's ratio (`ratios`:
    {(group index, variant): compare row}) to its group's baseline written above it."""
    workload = subset[0].workload
    variants = list(colours)
    unit = next((r.unit for r in subset if r.unit), "") or ""
    shown = [r for g in groups for rs in list(g.ok.values()) + list(g.other.values()) for r in rs]
    name = workload if headline else f"{workload}_{metric}"
    fig = draw_grouped_bars(groups, variants, colours, unit=unit, ratios=ratios,
                            title=f"{workload}: {metric} by backend, per configuration (median, 95% CI)",
                            subtitle=describe_settings(shown), y_label=axis_label(metric, unit))
    bases = sorted({group_baseline(variants, g) for g in groups if len(g.ok) > 1} - {None})
    caption = (f"Each bar is the median {metric} over that configuration's processes, its whisker the bootstrap "
               "95% CI over processes (one process: over its timed blocks). Above each bar: its ratio to "
               f"{' / '.join(bases) or 'the baseline'} in the same configuration and the verdict of "
               "`harness compare --by backend` (bold: a difference; same \u00b1X%: the CI over processes lies within "
               "X% of the baseline; n.s.: no difference found; inconclusive: "
               "too few processes; busy: measured on a busy machine). A status word in place of a bar: that "
               "run did not finish (see below). "
               f"Frameworks: {versions(shown)}. {sentence(describe_settings(shown))}.")
    return Plot(f"frameworks_{name}", f"{workload}: backends compared", canvas.png(fig), caption)


def plot_tflops_vs_peak(records: list[Result], spec, colours: dict) -> Plot | str:
    """Achieved TFLOP/s per configuration and backend variant, with the device's dense datasheet peak
    for the workload's precision drawn where it is known; or why it is skipped."""
    mine = [r for r in not_probes(records) if r.workload == spec.name and r.metric in (spec.metric, None)]
    if not any(r.status == "ok" for r in mine):
        return f"No {spec.name} results with status ok: TFLOP/s against the datasheet peak skipped."
    groups = configuration_groups(mine)
    missing = []
    for group in groups:
        first = next(iter(group.ok.values()), None) or next(iter(group.other.values()))
        group.peak, what = device_peak(first[0], spec)
        if not group.peak:
            missing.append(what)
    known = any(g.peak for g in groups)
    if not known and len({variant for g in groups for variant in g.ok}) > 1:
        # the frameworks plot draws these very bars; without a peak this one would add nothing
        return (f"No datasheet figure for {', '.join(sorted(set(missing)))}: the achieved TFLOP/s are the bars "
                f"of \"{spec.name}: backends compared\" above; no plot against a peak.")
    value = lambda r: r.tflops if r.tflops is not None else r.median  # noqa: E731
    title = f"{spec.name}: achieved TFLOP/s" + (" against the datasheet peak" if known else "")
    described = describe_settings(mine)
    fig = draw_grouped_bars(groups, list(colours), colours, value=value, unit="TFLOP/s", title=title,
                            subtitle=described, y_label="TFLOP/s")
    caption = f"Median achieved TFLOP/s over processes, 95% CI whiskers. {sentence(described)}."
    if known:
        caption += (" The red line is the device's dense datasheet peak for that precision; the label, the percent "
                    "of it.")
    if missing:
        caption += " No datasheet figure for: " + ", ".join(sorted(set(missing))) + "."
    return Plot(f"{spec.name}_tflops_vs_peak", title, canvas.png(fig), caption)


def _speedup_bar(ax, i: int, r: ComparisonRow, colour: str, variant: str, seen: list[str]) -> None:
    """One technique row's bar: its ratio with the CI (pale without a verdict) and its change written beside it."""
    ratio = r.ratio
    if ratio is None or r.ratio_ci_low is None:
        if ratio is not None:
            ax.barh(i, ratio, color=colour, alpha=0.35)
        return
    err = [[max(ratio - r.ratio_ci_low, 0)], [max(r.ratio_ci_high - ratio, 0)]]
    significant = is_difference(r.verdict)
    ax.barh(i, ratio, xerr=err, color=colour, alpha=0.9 if significant else 0.35, capsize=3,
            label=variant if variant not in seen else None)
    seen.append(variant)
    note = f"{r.change_pct:+.1f}%"
    if not significant:
        note += f" ({short_verdict(r.verdict)}, {r.baseline_runs} vs {r.value_runs})"
    ax.text(r.ratio_ci_high, i, " " + note, va="center", fontsize="small")


def plot_technique_speedups(tables: dict[str, list[ComparisonRow]], colours: dict | None = None) -> Plot | str:
    """Ratio of each technique value to its baseline value (95% CI), one colour per backend variant."""
    rows = [r for found in tables.values() for r in found]
    if not rows:
        return (f"No technique ({', '.join(technique_baselines())}) was measured at two values under otherwise "
                "equal settings: technique speedups skipped.")
    colours = dict(colours or {})
    labels, varying = speedup_labels(rows)
    fig_w = 10.0
    fig = canvas.figure(fig_w, max(2.8, 0.42 * len(rows) + 1.8))
    ax = fig.add_subplot()
    seen: list[str] = []
    for i, r in enumerate(rows):
        variant = row_variant(r)
        _speedup_bar(ax, i, r, colours.setdefault(variant, PALETTE[len(colours) % len(PALETTE)]), variant, seen)
    ax.axvline(1.0, color="black", linewidth=1)
    highs = [r.ratio_ci_high for r in rows if present(r.ratio_ci_high)]
    highs += [r.ratio for r in rows if present(r.ratio)]
    quiet = any(not is_difference(r.verdict) for r in rows)
    ax.set_xlim(0, max(highs + [1.0]) * (1.45 if quiet else 1.2))  # room for the labels
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel("ratio to baseline (higher is faster)")
    ax.grid(True, axis="x", alpha=0.3)
    if seen:
        canvas.legend_outside(ax)
    baselines = ", ".join(f"{k}={v}" for k, v in technique_baselines().items())
    records_context = "; ".join(f"{w}: {', '.join(v) + ' vary' if v else 'nothing else varies'}"
                                for w, v in varying.items())
    canvas.title(ax, "Speedup of each technique against its baseline (95% CI; pale: no verdict)",
           f"varies: the technique, backend; {records_context}; baselines: {baselines}", fig_w)
    return Plot("technique_speedups", "Speedup of each technique", canvas.png(fig),
                "Ratio of medians over processes with a bootstrap 95% CI; a pale bar has no verdict of a difference: "
                "same \u00b1X% (the CI lies within X% of 1), n.s. (no difference found) or inconclusive (too few processes for any verdict), with the processes per "
                "side. Baselines: " + baselines + ".")
