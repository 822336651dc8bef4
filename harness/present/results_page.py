"""The published results page (docs/results.md): every figure generated from the stores its manifest
lists, with hand-written commentary kept across regeneration.

Commentary lives between `<!-- commentary:NAME -->` and `<!-- /commentary:NAME -->`; everything else
on the page is generated and is overwritten. Each section of the manifest gives a slot named by its
id, and the page has two more: `answer` (at the top, what the figures mean together) and `reproduce`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from harness.errors import InputError
from harness.present.cells import run_time
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
from harness.results.compare.breakdown import PARTS, Side
from harness.results.manifest import Manifest, PageSection, load_manifest, load_stores
from harness.results.record import Result

#: A commentary block of an existing page: its name and its text.
COMMENTARY = re.compile(r"<!-- commentary:([a-z0-9-]+) -->\n(.*?)<!-- /commentary:\1 -->", re.S)
#: Where a slot nobody has written yet says so.
EMPTY_COMMENTARY = "(no commentary yet)\n"
#: The columns of a comparison the page shows after the configuration (in this order, when present).
PAGE_COLUMNS = ("baseline", "value", "baseline median", "median", "unit", "ratio [95% CI]", "scaling efficiency",
                "processes", "verdict")
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


def _selected(section: PageSection, stores: dict[str, list[Result]]) -> list[Result]:
    """The section's records: each store's, filtered by that store's own `where` in the section, then by the
    section's."""
    return _kept([r for s in section.stores for r in _kept(stores[s.file], s.where)], section.where)


def _filter_text(where: dict) -> str:
    return "; ".join(f"{field}: {', '.join(map(str, v)) if isinstance(v, list) else v}" for field, v in where.items())


def _verdict(row: dict, source: ComparisonRow) -> str:
    if source.baseline_runs < 2 and source.value_runs < 2:
        return ONE_PROCESS
    return str(row["verdict"]).split(":")[0]


def section_rows(section: PageSection, records: list[Result]) -> tuple[dict, list[dict]]:
    """(what every row shares, the rows as the page shows them) of one section's comparison."""
    try:
        table = comparison_rows(records, section.by, section.baseline, section.metric)
    except InputError as exc:
        raise InputError(f"section {section.id}: {exc}", source=exc.source, field=f"sections.{section.id}") from None
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
        cells.setdefault(key, {}).setdefault(column, []).append(fmt(value, 4 if section.metric == "median" else 3))
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
    rows = [{"ms per step": part, **{name: f"{side.ms[part]:.2f}" for name, side in sides.items()}} for part in PARTS]
    rows.append({"ms per step": "profiled step", **{n: f"{s.step_ms:.2f}" for n, s in sides.items()}})
    rows.append({"ms per step": "timed step", **{n: f"{s.timed_ms:.2f}" if s.timed_ms else "-" for n, s in sides.items()}})
    rows.append({"ms per step": "profiled vs timed",
                 **{n: f"{100 * (s.step_ms / s.timed_ms - 1):+.1f}%" if s.timed_ms else "-" for n, s in sides.items()}})
    return rows


def time_rows(section: PageSection, records: list[Result]) -> list[dict]:
    """A `time` section's rows: what its records took, a row per value of its `rows` fields (in the records'
    order) and, under several, one adding them up. `runs`: records, of them measured (ok) and decided at once
    (unsupported); `processes`: ok processes a configuration; `first steps` and `timed blocks`: their seconds
    added up, the first steps also as a share of the run time; `run time`: the records' `duration_s` added up,
    as `harness results --sessions` adds them."""
    groups: dict[tuple, list[Result]] = {}
    for record in records:
        groups.setdefault(tuple(field_value(record, f) for f in section.rows), []).append(record)
    rows = [{**{f: fmt(v) for f, v in zip(section.rows, key)}, **_time_cells(group)} for key, group in groups.items()]
    if len(groups) > 1:
        rows.append({**{f: "all" if i == 0 else "" for i, f in enumerate(section.rows)}, **_time_cells(records)})
    return rows


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


def section_lines(section: PageSection, manifest: Manifest, records: list[Result], kept: dict,
                  base: str) -> list[str]:
    """One section of the page: title, its stores, what the rows share, the table, its commentary."""
    laid_out = {"values": values_rows, "breakdown": breakdown_rows, "time": time_rows}.get(section.kind)
    if laid_out is not None:
        rows = laid_out(section, records)
        lines = [f"## {section.title}", "", _store_line(section, manifest, base), "", markdown_table(rows), ""]
        return lines + _block(section.id, kept)
    common, rows = section_rows(section, records)
    lines = [f"## {section.title}", "", _store_line(section, manifest, base), "", describe_common(common) + ".", "",
             markdown_table(rows), ""]
    if any(r["verdict"] == ONE_PROCESS for r in rows):
        lines += [f"`{ONE_PROCESS}`: each side is one worker process, so its interval comes from that process's "
                  "timed blocks and no verdict (faster, slower, same) rests on it.", ""]
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


def page_text(manifest: Manifest, stores: dict[str, list[Result]], kept: dict[str, str], command: str,
              base: str) -> str:
    """The whole page: the answer's commentary, each section, the stores, how to reproduce. `base`: the
    stores' folder relative to the page's, for links."""
    lines = [f"# {manifest.title}", "",
             f"<!-- Generated by `{command}` from the stores' manifest: edit only between commentary markers. -->",
             ""]
    lines += _block("answer", kept)
    for section in manifest.sections:
        lines += section_lines(section, manifest, _selected(section, stores), kept, base)
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
    return page_text(manifest, stores, kept, command, base)


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

