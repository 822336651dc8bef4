"""The report's sections, in the order a reader needs them: the framework comparison, the runs that did
not finish, each workload's own plots, technique speedups, scaling, device ratios, every result, every
warning."""

from __future__ import annotations

from harness.errors import InputError
from harness.present.report.bars import plot_frameworks, plot_technique_speedups
from harness.present.report.breakdown import breakdown_section
from harness.present.report.page import CELL_CHARS, Section, cell_text
from harness.present.report.plots import PLOT_KINDS
from harness.present.report.rows import (
    device_ratio_rows,
    result_rows,
    unfinished_rows,
    warning_lines,
)
from harness.present.report.shaping import (
    configuration_groups,
    group_ratios,
    metric_sets,
    not_probes,
    settings,
    variant_colours,
    variant_of,
    workload_spec,
)
from harness.results.compare import (
    as_results,
    comparison_rows,
    describe_common,
    describe_fastest,
    display_rows,
    fastest_configurations,
    ok_records,
    technique_speedups,
)
from harness.results.record import Result
from harness.results.sessions import UnfinishedSession
from harness.seam.backend import BUILTIN_BACKENDS
from harness.workloads import WORKLOADS


def framework_section(records: list[Result], colours: dict) -> Section:
    """PyTorch against TensorFlow (every backend variant): grouped bars per configuration, the
    ratio on each bar, the comparison table, and each variant's fastest configuration."""

    records = not_probes(records)
    variants = list(colours)
    others = sorted({str(r.backend) for r in records} - set(BUILTIN_BACKENDS))
    section = Section("PyTorch vs TensorFlow" + (f" (and {', '.join(others)})" if others else ""))
    for workload, metric, subset in metric_sets(records):
        spec = workload_spec(workload)
        mine = [v for v in variants if any(variant_of(r) == v for r in subset)]
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
        ratios, rows = group_ratios(groups, variants)
        section.parts.append(plot_frameworks(subset, groups, ratios, colours, metric=metric, headline=headline))
        section.parts.append(("list", lines))
        if rows:
            common, display = display_rows(rows)
            section.parts.append(("text", describe_common(common)))
            section.parts.append(("table", display))
    return section


def unfinished_section(records: list[Result], sessions: list[UnfinishedSession] | None = None) -> Section:
    """Runs that ended other than ok, and sessions that ended before their plan did (`sessions`: from
    harness.commands.report.unfinished_sessions), whose missing runs left no record at all."""
    section = Section("Runs that did not finish")
    rows = unfinished_rows(records)
    probes = [r for r in records if r.probe_of]
    for s in sessions or []:
        if s.left:
            section.parts.append(("text", (
                f"Session {s.session_id} ended {s.state}: {s.left} of its {s.planned} planned "
                f"{s.what} have no ok result (a run stopped part-way leaves no record). "
                f"`harness run --resume {s.session_id}` runs them.")))
    if rows:
        section.parts.append(("text", f"{len(rows)} configuration(s) with runs that ended other than ok "
                                      "(unsupported: the backend cannot run it, and says why; failed, timeout, "
                                      "oom, diverged: it ran and did not finish). They are in no plot's bars."))
        section.parts.append(("table", rows, 2 * CELL_CHARS))  # a reason's first lines, whole
    elif any(s.left for s in sessions or []):
        section.parts.append(("text", "Every stored run ended ok."))
    else:
        section.parts.append(("text", "Every run ended ok."))
    if probes:
        section.parts.append(("text", f"{len(probes)} capacity probe(s) of --find-max-batch are not listed: an "
                                      "out-of-memory probe is how the search finds the limit."))
    return section


def workload_section(name: str, records: list[Result], colours: dict) -> Section:
    """A workload's own plots, as it declares them (`Workload.plots`), or why there are none."""
    spec = workload_spec(name)
    section = Section(f"{name}: {spec.description}" if spec is not None else str(name))
    if spec is None or not spec.plots:
        section.parts.append(f"The workload {name} declares no plots.")
        return section
    for kind in spec.plots:
        draw = PLOT_KINDS.get(kind)
        section.parts.append(draw(records, spec, colours) if draw
                             else f"Plot kind {kind!r} is not drawn by this version.")
    return section


def technique_section(records: list[Result], colours: dict) -> Section:
    """Each technique against its baseline value: the speedup plot and a table per technique and workload."""
    section = Section("Speedup of each technique")
    tables = technique_speedups(records)
    section.parts.append(plot_technique_speedups(tables, colours))
    for rows in tables.values():
        for workload in dict.fromkeys(r.fixed("workload") for r in rows):
            part = [r.with_whole_numbers() for r in rows if r.fixed("workload") == workload]
            common, shown = display_rows(part)
            section.parts.append(("text", describe_common(common)))
            section.parts.append(("table", shown))
    return section


def scaling_section(records: list[Result]) -> Section | None:
    """Data-parallel scaling (docs/distributed.md): each configuration against itself at fewer replicas,
    with its scaling efficiency; None when no record ran more than one replica."""

    section = Section("Data-parallel scaling")
    for workload in dict.fromkeys(r.workload for r in records):
        name = getattr(WORKLOADS.get(workload), "replicas_param", None)
        mine = [r for r in records if r.workload == workload]
        if not name or len({int(r.replicas or 1) for r in mine}) < 2:
            continue
        try:
            table = comparison_rows(mine, [name])
        except InputError:
            continue
        common, rows = display_rows(table)
        section.parts.append(("text", describe_common(common) + ". Scaling efficiency: global rate at R replicas / "
                              "(R x the rate at the baseline's replicas / its replicas)."))
        section.parts.append(("table", [{k: v for k, v in r.items() if k != "warnings"} for r in rows]))
    return section if section.parts else None


def results_section(records: list[Result]) -> Section:
    """A table per workload, one row per result; what every row shares is said once above it."""
    section = Section("Results")
    for workload in dict.fromkeys(r.workload for r in records):
        mine = [r for r in records if r.workload == workload]
        _, fixed = settings(mine)
        rows = result_rows(mine)
        texts = {c: [cell_text(row.get(c)) for row in rows] for c in dict.fromkeys(k for row in rows for k in row)}
        same = [c for c, cells in texts.items() if len(rows) > 1 and len(set(cells)) == 1 and c != "backend"]
        fixed += [f"{c} {texts[c][0]}" for c in same if texts[c][0] not in ("", "-")
                  and f"({texts[c][0]})" not in " ".join(fixed)]  # the device, said already
        fixed += [f"no {c}" for c in same if texts[c][0] == "-"]
        rows = [{k: v for k, v in row.items() if k not in same} for row in rows]
        section.parts.append(("text", f"{workload}, {len(mine)} result(s); every row: {', '.join(fixed) or '-'}."))
        section.parts.append(("table", rows))
    return section


def build_sections(records, sessions: list[UnfinishedSession] | None = None) -> list[Section]:
    """The report's sections, in order, from result records (all statuses; plots use only ok ones) and the
    unfinished sessions they came from (see unfinished_section)."""
    records = as_results(records)
    if not records:
        raise InputError("no results to report")
    colours = variant_colours(not_probes(records) or records)
    sections = [framework_section(records, colours), unfinished_section(records, sessions)]
    for name in dict.fromkeys(r.workload for r in records):
        sections.append(workload_section(name, [r for r in records if r.workload == name], colours))
    sections.append(technique_section(ok_records(records), colours))
    scaling = scaling_section(ok_records(records))
    if scaling is not None:
        sections.append(scaling)
    profiled = breakdown_section(not_probes(records))
    if profiled is not None:
        sections.append(profiled)

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

