"""The report's section on where each side's step goes: for every profiled comparison (each backend variant
and execution against the group's first), stacked bars of the profile classes in ms per step, baseline and
side next to each other, and the table of the differences."""

from __future__ import annotations

from harness.errors import InputError
from harness.present.report.canvas import figure, png
from harness.present.report.page import Plot, Section
from harness.results.compare.breakdown import PARTS, Pair, breakdown_pairs, profile_ms
from harness.results.record import Result

#: What the section compares: the framework (its variant) and how the step runs, like with like otherwise.
BY = ["backend", "execution"]
#: One colour per class, idle grey, fixed so that every plot reads the same.
CLASS_COLOURS = {
    "conv": "#1f77b4", "matmul": "#ff7f0e", "attention": "#393b79", "norm": "#2ca02c", "elementwise": "#d62728", "reduce": "#9467bd",
    "layout": "#8c564b", "copy": "#e377c2", "comm": "#bcbd22", "other": "#17becf", "idle": "#c7c7c7",
}


def plot_pairs(pairs: list[Pair], title: str, slug: str = "profile_breakdown") -> Plot:
    """Horizontal stacked bars, one per side of each pair (baseline above its side), a segment per class."""
    bars = []
    for pair in pairs:
        bars += [(pair.baseline.label, pair.baseline.ms), (f"{pair.value.label}", pair.value.ms), None]
    bars = bars[:-1]
    fig = figure(9.0, max(2.5, 0.45 * len(bars) + 1.5))
    ax = fig.add_subplot()
    for y, bar in enumerate(reversed(bars)):
        if bar is None:
            continue
        left = 0.0
        for part in PARTS:
            ax.barh(y, bar[1][part], left=left, color=CLASS_COLOURS[part], label=part if y == 0 else None)
            left += bar[1][part]
    ax.set_yticks([y for y, bar in enumerate(reversed(bars)) if bar is not None])
    ax.set_yticklabels([bar[0] for bar in reversed(bars) if bar is not None], fontsize=8)
    ax.set_xlabel("ms per step (the framework's own profiler)")
    ax.set_title(title, fontsize=10, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return Plot(slug=slug, title=title, png=png(fig),
                caption="Each bar is one side's profiled step, split into the classes of docs/profile.md; idle is "
                        "the time no kernel ran. A side is drawn under its baseline.")


def pair_rows(pairs: list[Pair]) -> list[dict]:
    """The differences as table rows: one per pair, ms per step of each class, the side's minus the baseline's."""
    rows = []
    for pair in pairs:
        row = {"side": pair.value.label, "baseline": pair.baseline.label,
               "step ms": f"{pair.value.step_ms:.2f} vs {pair.baseline.step_ms:.2f}"}
        row.update({part: f"{pair.diff_ms(part):+.2f}" for part in PARTS})
        rows.append(row)
    return rows


def breakdown_section(records: list[Result]) -> Section | None:
    """The section, or None where no record was profiled (a report of unprofiled runs has no such section)."""
    if not any(profile_ms(r) is not None for r in records if r.status == "ok"):
        return None
    section = Section("Where the step goes (profile breakdown)")
    try:
        pairs = breakdown_pairs(records, BY)
    except InputError as exc:
        section.parts.append(("text", f"No two profiled runs differ only in backend and execution: {exc}"))
        return section
    section.parts.append(("list", [pair.sentence() for pair in pairs]))
    # one plot per workload: a GEMM's fraction of a millisecond beside ResNet-50's tens of ms is no bar at all
    by_workload: dict[str, list[Pair]] = {}
    for pair in pairs:
        by_workload.setdefault(str(pair.where.get("workload", "")), []).append(pair)
    several = len(by_workload) > 1
    for workload, group in by_workload.items():
        section.parts.append(plot_pairs(
            group, "ms per step by class: each side under its baseline" + (f" ({workload})" if several else ""),
            slug=f"profile_breakdown_{workload}" if several and workload else "profile_breakdown"))
    section.parts.append(("table", pair_rows(pairs)))
    return section
