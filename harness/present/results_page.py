"""The published results page (docs/results.md): every figure generated from the stores its manifest
lists, with hand-written commentary kept across regeneration.

Commentary lives between `<!-- commentary:NAME -->` and `<!-- /commentary:NAME -->`; everything else
on the page is generated and is overwritten. Each section of the manifest gives a slot named by its
id, and the page has one more, `reproduce`. The answer at the top is generated too: the first screen's
table (each framework's fastest path, page_answer) and the manifest's answer template, its figures filled
from the page's tables; a page whose manifest names no answer keeps an `answer` commentary slot instead.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from harness.errors import InputError
from harness.present.cells import run_time
from harness.present.page_answer import (
    FIRST_SCREEN,
    KERNEL_MARK,
    capacity_notes,
    fill,
    first_screen_rows,
    kernel_bound_answer,
    marked,
    origin,
    rewrapped,
    row_records,
)
from harness.present.report.page import Markdown, markdown_table
from harness.results.compare import (
    METRICS,
    ComparisonRow,
    comparison_rows,
    describe_common,
    display_rows,
    field_value,
    fmt,
)
from harness.results.compare.breakdown import Side, shown_parts
from harness.results.manifest import Manifest, PageSection, load_manifest, load_stores
from harness.results.record import Result

#: A commentary block of an existing page: its name and its text.
COMMENTARY = re.compile(r"<!-- commentary:([a-z0-9-]+) -->\n(.*?)<!-- /commentary:\1 -->", re.S)
#: Where a slot nobody has written yet says so.
EMPTY_COMMENTARY = "(no commentary yet)\n"
#: The columns of a comparison the page shows after the configuration (in this order, when present).
PAGE_COLUMNS = ("baseline", "value", "baseline median", "median", "unit", "ratio [95% CI]", "scaling efficiency",
                "processes", "p", "verdict")
#: The column of a row's mark where it was measured apart from its table's other rows (page_answer.marked).
MARK_COLUMN = "measured apart"
#: Match fields the page leaves out: a scenario's name is how a store keyed its runs, not a product term.
HIDDEN = ("scenario",)
#: The verdict of a row measured with one process a side.
ONE_PROCESS = "no verdict: one process a side"


def commentary_blocks(text: str) -> dict[str, str]:
    """The commentary of an existing page, by slot name."""
    return {name: body for name, body in COMMENTARY.findall(text)}


def _block(name: str, kept: dict[str, str]) -> list[str]:
    body = kept.get(name, EMPTY_COMMENTARY)
    return [f"<!-- commentary:{name} -->", body.rstrip("\n"), f"<!-- /commentary:{name} -->", ""]


def _kept(records: list[Result], where: dict) -> list[Result]:
    for field, wanted in where.items():
        allowed = {str(v) for v in (wanted if isinstance(wanted, list) else [wanted])}
        records = [r for r in records if str(field_value(r, field)) in allowed]
    return records


def _selected(section: PageSection, stores: dict[str, list[Result]]) -> list[tuple[str, Result]]:
    """The section's records with their store's file: each store's, filtered by that store's own `where` in the
    section, then by the section's."""
    return [(s.file, r) for s in section.stores for r in _kept(_kept(stores[s.file], s.where), section.where)]


def _filter_text(where: dict) -> str:
    return "; ".join(f"{field}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for field, v in where.items())


def _verdict(row: dict, source: ComparisonRow) -> str:
    """compare's verdict with its reason, whole ("no difference found: -1.6% is under the 2% minimum effect")."""
    if source.baseline_runs < 2 and source.value_runs < 2:
        return ONE_PROCESS
    return str(row["verdict"])


def section_table(section: PageSection, records: list[Result]) -> list[ComparisonRow]:
    """A comparison section's rows as compare pairs them; InputError naming the section."""
    try:
        return comparison_rows(records, section.by, section.baseline, section.metric)
    except InputError as exc:
        raise InputError(f"section {section.id}: {exc}", source=exc.source, field=f"sections.{section.id}") from None


def section_rows(section: PageSection, records: list[Result]) -> tuple[dict, list[dict]]:
    """(what every row shares, the rows as the page shows them) of one section's comparison."""
    table = section_table(section, records)
    common, rows = display_rows(table)
    shown = []
    for source, row in zip(table, rows):
        config = {k: v for k, v in row.items() if k not in PAGE_COLUMNS and k not in HIDDEN and k not in
                  ("change", "p", "warnings")}
        picked = {k: row[k] for k in PAGE_COLUMNS if k in row}
        picked["verdict"] = _verdict(row, source)
        shown.append({**{k: config[k] for k in (section.columns or config) if k in config}, **picked})
    return {k: v for k, v in common.items() if k not in HIDDEN}, shown


#: The unit of a record's figure other than its headline (whose unit the record states), for each of the
#: comparison's METRICS.
METRIC_UNITS = {"tflops": "TFLOP/s", "pct_of_peak": "%", "step_time_s": "s", "first_step_s": "s",
                "peak_allocated_bytes": "bytes", "device_used_bytes": "bytes", "host_peak_rss_bytes": "bytes",
                "energy_j": "J", "avg_power_w": "W"}


def values_rows(section: PageSection, records: list[Result]) -> list[dict]:
    """A `values` section's rows: one per value of its `rows` fields, a column per value of its `by`
    fields holding each ok record's figure, its `metric` (the headline median unless the section names
    another, such as `first_step_s`), in the records' order (several records of one cell: each, separated
    by `;`)."""
    if section.metric not in METRICS:
        raise InputError(f"sections.{section.id}.metric: {section.metric!r} is not a figure of a record; expected "
                         f"one of {', '.join(METRICS)}", field=f"sections.{section.id}.metric")
    cells: dict[tuple, dict[str, list[str]]] = {}
    unit = METRIC_UNITS.get(section.metric, "")
    for record in (r for r in records if r.status == "ok"):
        key = tuple(field_value(record, f) for f in section.rows)
        column = " / ".join(str(field_value(record, f)) for f in section.by)
        value = record.median if section.metric == "median" else getattr(record, section.metric)
        mark = f" {KERNEL_MARK}" if section.metric == "median" and kernel_bound_answer(record) else ""
        cells.setdefault(key, {}).setdefault(column, []).append(fmt(value, 4 if section.metric == "median" else 3) + mark)
        if section.metric == "median":
            unit = record.unit or unit
    columns = list(dict.fromkeys(c for row in cells.values() for c in row))
    rows = []
    for key, row in cells.items():
        shown = {f: fmt(v) for f, v in zip(section.rows, key)}
        shown.update({c: "; ".join(row.get(c, ["-"])) for c in columns})
        shown["unit"] = unit
        rows.append(shown)
    return rows


def breakdown_rows(section: PageSection, records: list[Result]) -> list[dict]:
    """A `breakdown` section's rows: milliseconds per step in each class and idle (docs/profile.md), the
    profiled step they add up to and the timed step beside it, a column per value of its `by` fields (the
    mean over that value's profiled ok records, as `harness compare --breakdown` takes it). The columns of the
    section's `baseline` (the value of its first `by` field) come first, the rest in the records' order."""
    groups: dict[str, list[Result]] = {}
    ok = [r for r in records if r.status == "ok"]
    if section.baseline is not None:
        ok.sort(key=lambda r: str(field_value(r, section.by[0])) != section.baseline)
    for record in ok:
        groups.setdefault(" / ".join(str(field_value(record, f)) for f in section.by), []).append(record)
    sides = {name: side for name, group in groups.items() if (side := Side.of(name, group)) is not None}
    rows = [{"ms per step": part, **{name: f"{side.ms[part]:.2f}" for name, side in sides.items()}}
            for part in shown_parts(sides.values())]
    rows.append({"ms per step": "profiled step", **{n: f"{s.step_ms:.2f}" for n, s in sides.items()}})
    rows.append({"ms per step": "timed step", **{n: f"{s.timed_ms:.2f}" if s.timed_ms else "-" for n, s in sides.items()}})
    rows.append({"ms per step": "profiled vs timed",
                 **{n: f"{100 * (s.step_ms / s.timed_ms - 1):+.1f}%" if s.timed_ms else "-" for n, s in sides.items()}})
    return rows


def time_rows(section: PageSection, records: list[Result]) -> list[dict]:
    """A `time` section's rows: what its records took, a row per value of its `rows` fields and session (in the
    records' order), so that each row is one session on one machine, and, under several, their sum, labelled
    with the dates and GPUs of its parts. `session`, `date`, `GPU` (the first 12 characters of its UUID): where
    a row was measured; `runs`: records, of them measured (ok) and decided at once (unsupported); `processes`:
    ok processes a configuration; `first steps` and `timed blocks`: their seconds added up, the first steps
    also as a share of the run time; `run time`: the records' `duration_s` added up, as `harness results
    --sessions` adds them."""
    groups: dict[tuple, list[Result]] = {}
    for record in records:
        groups.setdefault(tuple(field_value(record, f) for f in section.rows) + (record.session_id,), []).append(record)
    rows = [{**{f: fmt(v) for f, v in zip(section.rows, key)}, **_where_measured(group), **_time_cells(group)}
            for key, group in groups.items()]
    if len(groups) > 1:
        label = {f: f"sum of the {len(groups)} parts above" if i == 0 else "" for i, f in enumerate(section.rows)}
        rows.append({**label, **_where_measured(records), **_time_cells(records)})
    return rows


def _where_measured(records: list[Result]) -> dict:
    sessions = list(dict.fromkeys(r.session_id or "-" for r in records))
    gpus = sorted({r.gpu_uuid()[:12] for r in records if r.gpu_uuid()})
    return {"session": sessions[0] if len(sessions) == 1 else f"{len(sessions)} sessions",
            "date": ", ".join(sorted({r.started_at[:10] for r in records if r.started_at})) or "-",
            "GPU": ", ".join(gpus) or "-"}


def _time_cells(records: list[Result]) -> dict:
    run_s = sum(r.duration_s or 0.0 for r in records)
    first_s = sum(r.first_step_s or 0.0 for r in records if r.status == "ok")
    blocks_s = sum(r.timing.blocks_s() for r in records if r.status == "ok")
    per_config = Counter(r.run_key for r in records if r.status == "ok")
    counts = sorted(set(per_config.values()))
    ok, unsupported = sum(r.status == "ok" for r in records), sum(r.status == "unsupported" for r in records)
    return {"runs": f"{len(records)} ({ok} measured, {unsupported} decided at once)",
            "processes a configuration": "-" if not counts else
            str(counts[0]) if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}",
            "first steps": f"{first_s:,.0f} s ({first_s / run_s:.0%})" if run_s else "-",
            "timed blocks": f"{blocks_s:,.1f} s",
            "run time": f"{run_s:,.0f} s" + (f" ({run_time(run_s)})" if run_s >= 120 else "")}


def _href(base: str, name: str) -> str:
    return name if base in ("", ".") else f"{base}/{name}"


def _store_line(section: PageSection, manifest: Manifest, base: str) -> str:
    links = []
    for store in section.stores:
        entry = manifest.entry(store.file)
        facts = [", ".join(entry.dates), entry.hardware]
        if store.where:
            facts.append(f"only {_filter_text(store.where)}")
        links.append(f"[{store.file}]({_href(base, store.file)}) ({', '.join(facts)})")
    return "From " + "; ".join(links) + "."


def laid_out_rows(section: PageSection, records: list[tuple[str, Result]], manifest: Manifest) -> tuple[list[dict], list[str]]:
    """(the rows of a section's table as the page shows them, unformatted for markdown; the notes under it)."""
    plain = [r for _, r in records]
    laid_out = {"values": values_rows, "breakdown": breakdown_rows, "time": time_rows}.get(section.kind)
    if laid_out is not None:
        rows = laid_out(section, plain)
        return rows, (capacity_notes(plain) if section.kind == "values" and section.metric == "median" else [])
    table = section_table(section, plain)
    _, rows = section_rows(section, plain)
    marks, notes = marked([origin(row_records(r, section.by, records), manifest) for r in table])
    if any(marks):
        rows = [{**row, MARK_COLUMN: mark} for row, mark in zip(rows, marks)]
    if any(r["verdict"] == ONE_PROCESS for r in rows):
        notes.append(f"`{ONE_PROCESS}`: each side is one worker process, so its interval comes from that process's "
                     "timed blocks and no verdict (faster, slower, same) rests on it.")
    return rows, notes


def section_lines(section: PageSection, manifest: Manifest, records: list[tuple[str, Result]], kept: dict,
                  base: str, rows: list[dict], notes: list[str]) -> list[str]:
    """One section of the page: title, its stores, what the rows share, the table, the notes under it, its
    commentary."""
    lines = [f"## {section.title}", "", _store_line(section, manifest, base), ""]
    if section.kind == "compare":
        common, _ = section_rows(section, [r for _, r in records])
        lines += [describe_common(common) + ".", ""]
    lines += [markdown_table(rows), ""] + [line for note in notes for line in (note, "")]
    return lines + _block(section.id, kept)


def stores_table(manifest: Manifest, base: str) -> str:
    """Every store of the manifest, one row each: what, when, on what, with which software, by which command,
    and whether the page draws on it."""
    rows = [{"store": Markdown(f"[{s.file}]({_href(base, s.file)})"), "measured": s.measured, "dates": ", ".join(s.dates),
             "hardware": s.hardware + (f", driver {s.driver}" if s.driver else ""),
             "software": ", ".join(f"{k} {v}" for k, v in s.software.items()),
             "commit": s.commit or "not recorded", "command": Markdown(f"`{s.command}`"),
             "on this page": "yes" if s.current else "no (kept as evidence)"}
            for s in manifest.stores]
    return markdown_table(rows)


def answer_lines(manifest: Manifest, stores: dict[str, list[Result]], tables: dict[str, list[dict]],
                 template: str, source: str) -> list[str]:
    """The page's first screen: each framework's fastest path of each workload the manifest's answer names,
    with its ratio against the baseline on that path, the marks of rows measured apart, and the answer's
    template filled from the page's tables (this one as `first-screen`)."""
    sections = {s.id: s for s in manifest.sections}
    shown = []
    for part in manifest.answer.parts:
        for section in (sections[name] for name in part.sections):
            records = _selected(section, stores)
            for row, source_row, own in first_screen_rows(part.label, section_table(section, [r for _, r in records])):
                row["verdict"] = ONE_PROCESS if not own and source_row.baseline_runs < 2 and \
                    source_row.value_runs < 2 else row["verdict"]
                mine = [(f, r) for f, r in row_records(source_row, section.by, records)
                        if not own or str(field_value(r, section.by[0])) == source_row.baseline]
                runs = (source_row.baseline_runs,) if own else (source_row.baseline_runs, source_row.value_runs)
                figure = source_row.baseline_median if own else source_row.value_median
                shown.append((part.label, row, origin(mine, manifest), (min(runs) >= 2, figure)))
    rows, kept_origins = _fastest_per_framework(shown)
    marks, notes = marked(kept_origins)
    if any(marks):
        rows = [{**row, MARK_COLUMN: mark} for row, mark in zip(rows, marks)]
    tables[FIRST_SCREEN] = rows
    text = rewrapped(re.sub(r"<!--.*?-->\n?", "", fill(template, tables, source), flags=re.S))  # notes to its editor
    caption = (f"**Each framework's fastest path, and its ratio against {rows[0]['framework']} on that same path** "
               "(the fastest of the tables below with verdicts, else of those without):") if rows else ""
    return [caption, "", markdown_table(rows), ""] + [line for note in notes for line in (note, "")] + [
        text.rstrip("\n"), ""]


def _fastest_per_framework(shown: list[tuple]) -> tuple[list[dict], list]:
    """Of the first screen's candidates (label, row, origin, (with a verdict, figure)), each framework's fastest
    row of each workload, in the order first seen: a row with a verdict (two processes a side or more) before
    one without, then the higher figure (the page's figures are rates)."""
    best: dict[tuple[str, str], tuple] = {}
    for label, row, where, rank in shown:
        key = (label, row["framework"])
        if key not in best or rank > best[key][2]:
            best[key] = (row, where, rank)
    return [row for row, _, _ in best.values()], [where for _, where, _ in best.values()]


def page_text(manifest: Manifest, stores: dict[str, list[Result]], kept: dict[str, str], command: str,
              base: str, template: str | None = None, source: str = "the answer's template") -> str:
    """The whole page: the answer (generated from `template` where the manifest names one, else its commentary),
    each section, the stores, how to reproduce. `base`: the stores' folder relative to the page's, for links."""
    lines = [f"# {manifest.title}", "",
             f"<!-- Generated by `{command}` from the stores' manifest and its answer template: edit only between "
             "commentary markers, and the answer in its template. -->", ""]
    laid = {s.id: laid_out_rows(s, _selected(s, stores), manifest) for s in manifest.sections}
    if manifest.answer is not None and template is not None:
        lines += answer_lines(manifest, stores, {k: rows for k, (rows, _) in laid.items()}, template, source)
    else:
        lines += _block("answer", kept)
    for section in manifest.sections:
        lines += section_lines(section, manifest, _selected(section, stores), kept, base, *laid[section.id])
    lines += ["## The stores", "", stores_table(manifest, base), "", "## Reproduce", "",
              f"This page: `{command}`. Each store: its command above, on its hardware (docs/benchmarks.md).", ""]
    lines += _block("reproduce", kept)
    return "\n".join(lines).rstrip("\n") + "\n"


def build_page(manifest_path: str | Path, page_path: str | Path, command: str) -> str:
    """The page for `manifest_path` (its stores beside it), keeping the commentary of the page now at
    `page_path` if there is one. InputError where the manifest is unsound or disagrees with a store."""
    manifest_path, page_path = Path(manifest_path), Path(page_path)
    manifest = load_manifest(manifest_path)
    stores = load_stores(manifest, manifest_path.parent, manifest_path)
    kept = commentary_blocks(page_path.read_text()) if page_path.is_file() else {}
    base = Path(os.path.relpath(manifest_path.parent.resolve(), page_path.parent.resolve())).as_posix()
    template, source = None, "the answer's template"
    if manifest.answer is not None:
        template_path = manifest_path.parent / manifest.answer.template
        if not template_path.is_file():
            raise InputError(f"{manifest_path}: answer.template: no such file {template_path}",
                             source=str(manifest_path), field="answer.template")
        template, source = template_path.read_text(), str(template_path)
    return page_text(manifest, stores, kept, command, base, template, source)


#: A block of another page that the command fills with the stores table (docs/benchmarks.md has one).
STORES_BLOCK = re.compile(r"(<!-- generated:stores -->\n).*?(<!-- /generated:stores -->)", re.S)


def with_stores_table(manifest_path: str | Path, page_path: str | Path) -> str | None:
    """The text of `page_path` with its `<!-- generated:stores -->` block holding the manifest's stores
    table (links relative to that page), or None where the page has no such block."""
    manifest_path, page_path = Path(manifest_path), Path(page_path)
    if not page_path.is_file():
        return None
    text = page_path.read_text()
    if not STORES_BLOCK.search(text):
        return None
    base = Path(os.path.relpath(manifest_path.parent.resolve(), page_path.parent.resolve())).as_posix()
    table = stores_table(load_manifest(manifest_path), base)
    return STORES_BLOCK.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text)

