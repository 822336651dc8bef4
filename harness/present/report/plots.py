"""The report's plots against a workload's parameter (its `x_param`): the headline and the allocator's peak, one
line per backend variant and other varying setting; and the plot kinds a workload may declare (`PLOT_KINDS`), the
bar charts among them (harness.present.report.bars).

Every plot says what varies in it and what is fixed. A point is the median over the configuration's processes
(each worker process is one sample); its error bar is the bootstrap 95% CI over processes, or, with one process,
that process's CI over its timed blocks.
"""

from __future__ import annotations

from harness.present.report import canvas
from harness.present.report.bars import plot_tflops_vs_peak
from harness.present.report.page import Plot
from harness.present.report.shaping import (
    PALETTE,
    GiB,
    axis_label,
    describe_settings,
    device_label,
    estimate,
    line_points,
    not_probes,
    param_unit,
    sentence,
    shown_text,
    variant_of,
    versions,
)
from harness.results.compare import ok_records
from harness.results.record import Result


def _x_axis(ax, xs, name: str, workload: str | None) -> None:
    xs = sorted(set(xs))
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)
    if numeric and len(xs) > 1 and min(xs) > 0 and xs[-1] / xs[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs)
    ax.set_xticklabels([shown_text(x) for x in xs])
    unit = param_unit(workload, name)
    ax.set_xlabel(name + (f" ({unit})" if unit else ""))


def _line_plot(records: list[Result], spec, colours: dict, *, value, y_label: str, title: str, caption: str,
               slug: str, error_bars: bool, from_zero: bool, everything: list[Result]) -> Plot | str:
    x_param = spec.x_param
    lines, note = line_points(records, x_param, colours)
    if not lines:
        return f"No {spec.name} results with a value: {title.lower()} skipped."
    styles, markers = ["-", "--", ":", "-."], ["o", "s", "^", "D", "v", "P", "X"]
    rests = list(dict.fromkeys(rest for _, rest in lines))
    here = list(dict.fromkeys(variant for variant, _ in lines))
    single = len(here) == 1  # one backend variant: a colour per configuration instead
    fig_w = 8.5
    fig = canvas.figure(fig_w, 4.8)
    ax = fig.add_subplot()
    for (variant, rest), points in lines.items():
        xs = sorted(points)
        meds, lows, highs = [], [], []
        for x in xs:
            med, low, high, _ = estimate(points[x], value)
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
    canvas.legend_outside(ax)
    described = describe_settings(records, (x_param,))
    canvas.title(ax, title, described, fig_w)
    caption += (" One colour per configuration (one backend variant)." if single
                else " One colour per backend variant, one line style per other setting.")
    if any(r.status not in ("ok", None) for r in everything):
        caption += " Runs that did not finish are not drawn (see Runs that did not finish)."
    return Plot(slug, title, canvas.png(fig), f"{caption}{note} Frameworks: {versions(records)}. {sentence(described)}.")


def plot_metric_vs_x(records: list[Result], spec, colours: dict) -> Plot | str:
    """The workload's headline (median over processes, 95% CI) against its x_param, one line per
    backend variant and other varying setting; or why it is skipped."""
    if not spec.x_param:
        return f"The workload {spec.name} names no parameter to draw {spec.metric} against: plot skipped."
    mine = [r for r in ok_records(records) if r.workload == spec.name and r.metric in (spec.metric, None)]
    if not mine:
        return f"No {spec.name} results with status ok: {spec.metric} against {spec.x_param} skipped."
    return _line_plot(
        mine, spec, colours, value=None, y_label=axis_label(spec.metric, spec.unit),
        title=f"{spec.name}: {spec.metric} against {spec.x_param} (median, 95% CI)",
        caption=(f"Median {spec.unit} over each configuration's processes; error bars are the bootstrap 95% CI "
                 "over processes (one process: over its timed blocks)."),
        slug=f"{spec.name}_{spec.metric}_vs_{spec.x_param}", error_bars=True, from_zero=True,
        everything=not_probes([r for r in records if r.workload == spec.name]))


def plot_memory_vs_x(records: list[Result], spec, colours: dict) -> Plot | str:
    """The framework allocator's peak against the workload's x_param, from zero; or why it is skipped."""
    if not spec.x_param:
        return f"The workload {spec.name} names no parameter to draw memory against: plot skipped."
    mine = [r for r in ok_records(records) if r.workload == spec.name and r.metric in (spec.metric, None)]
    with_memory = [r for r in mine if r.peak_allocated_bytes is not None]
    if not with_memory:
        return f"No {spec.name} results with a peak allocated memory: memory against {spec.x_param} skipped."
    missing = sorted({f"{variant_of(r)} on {device_label(r)}" for r in mine} -
                     {f"{variant_of(r)} on {device_label(r)}" for r in with_memory})
    caption = ("The framework allocator's peak over the measured steps (not NVML's device memory used), median "
               "over processes; the axis starts at zero.")
    if missing:
        caption += " No allocator peak recorded for: " + "; ".join(missing) + "."
    return _line_plot(
        with_memory, spec, colours, value=lambda r: r.peak_allocated_bytes / GiB, y_label="peak allocated (GiB)",
        title=f"{spec.name}: peak allocated memory against {spec.x_param}",
        caption=caption, slug=f"{spec.name}_memory_vs_{spec.x_param}", error_bars=False, from_zero=True,
        everything=not_probes([r for r in records if r.workload == spec.name]))


#: Each plot kind a workload may declare (`Workload.plots`) and what draws it.
PLOT_KINDS = {
    "throughput_vs_x": plot_metric_vs_x,
    "memory_vs_x": plot_memory_vs_x,
    "tflops_vs_peak": plot_tflops_vs_peak,
}
