"""The report's tables and lists: runs that did not finish, device ratios, every result, every warning."""

from __future__ import annotations

import json

from harness.errors import InputError
from harness.present.report.shaping import (
    device_label,
    not_probes,
    setting,
    variant_of,
    varying_settings,
)
from harness.present.table import summary_rows
from harness.results.compare import alike, comparison_rows, display_rows
from harness.results.record import Result


def unfinished_rows(records: list[Result]) -> list[dict]:
    """One row per configuration and reason of every run that did not end ok (capacity probes left
    out): workload, backend, device, the settings that set it apart, status, processes, reason."""
    records = not_probes(records)
    bad = [r for r in records if r.status not in ("ok", None)]
    grouped: dict[tuple, list[Result]] = {}
    for r in bad:
        first = str(r.error or "").strip().splitlines()
        key = (r.workload, variant_of(r), device_label(r), json.dumps(r.params or {}, sort_keys=True,
               default=str), r.status, first[0] if first else "")
        grouped.setdefault(key, []).append(r)
    rows = []
    for (workload, variant, device, _, status, _reason), members in grouped.items():
        same = [r for r in records if r.workload == workload]
        settings = ", ".join(setting(workload, p, members[0].param(p)) for p in varying_settings(same))
        total = sum(1 for r in same if variant_of(r) == variant and r.params == members[0].params
                    and device_label(r) == device)
        rows.append({"workload": workload, "backend": variant, "device": device, "settings": settings or "-",
                     "status": status, "processes": f"{len(members)} of {total}",
                     "reason": str(members[0].error or "(no reason recorded)")})
    return rows


def device_ratio_rows(records: list[Result]) -> list[dict] | str:
    """Measured device ratios beside datasheet ratios as display rows; or why there are none."""
    names = {r.device_name for r in records} - {None}
    if len(names) < 2:
        return "Only one device in these results: no device ratios."
    try:
        table = comparison_rows(records, ["device_name"])
    except InputError as exc:
        return f"No device ratios: {exc}"
    common, rows = display_rows(table)
    return [{k: v for k, v in r.items() if k not in ("warnings",)} for r in rows] or "No device ratios."


def result_rows(records: list[Result]) -> list[dict]:
    """The results summary table (harness.present.table's rows), backend variants named, led by workload,
    device name and session where they vary."""

    lead = [f for f in ("workload", "device_name", "session_id") if len({getattr(r, f) for r in records}) > 1]
    rows = []
    for record, row in zip(records, summary_rows(records)):
        if "backend" in row:
            row["backend"] = variant_of(record)
        rows.append({**{f: getattr(record, f) for f in lead}, **row})
    return rows


def record_label(record: Result, params: list[str]) -> str:
    """`workload variant device param=value ...`: a record's configuration in one line of the warnings."""
    parts = [str(record.workload), variant_of(record), device_label(record)]
    parts += [setting(record.workload, p, record.param(p)) for p in params if record.param(p) is not None]
    return " ".join(parts)


def warning_lines(records: list[Result]) -> list[str]:
    """Every record's warnings and the error of every record that is not ok, one line per
    configuration and kind (texts that differ only in their figures told once, with a count)."""
    varying = {w: varying_settings([r for r in records if r.workload == w])
               for w in {r.workload for r in records}}
    per_label: dict[str, list[Result]] = {}
    for r in records:
        per_label.setdefault(record_label(r, varying[r.workload]), []).append(r)
    out = []
    for label, members in per_label.items():
        texts = []
        for r in members:
            if r.status not in ("ok", None):
                error = str(r.error or "").strip().splitlines()
                texts.append(f"status {r.status}" + (f": {error[0][:200]}" if error else ""))
            texts += list(dict.fromkeys(str(w) for w in r.warnings or []))
        out += [f"{label}: {text}" for text in alike(texts, len(members))]
    return out

