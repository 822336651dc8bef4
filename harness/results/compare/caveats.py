"""What a comparison row warns of, side by side: the warnings its processes gave (told once, with how many of
them gave one), pooled runs that differ in what should agree, a busy machine, and sides measured on different
machines."""

from __future__ import annotations

import re

from harness.machine.envcheck import busy_reasons
from harness.results.record import Result

#: Fields that do not identify a configuration but should agree between matched runs.
CONTEXT_FIELDS = ("framework_version", "device_name", "device")

def alike(texts: list[str], total: int) -> list[str]:
    """Texts that differ only in their figures told once, with how many of `total` processes gave one."""
    groups: dict[str, list[str]] = {}
    for text in texts:
        groups.setdefault(re.sub(r"[0-9][0-9.,]*", "#", text), []).append(text)
    out = []
    for found in groups.values():
        out.append(found[0] if total <= 1 else f"{found[0]} ({len(found)} of {total} processes)")
    return out


def side_warnings(label: str, records: list[Result], by: list[str]) -> list[str]:
    """The warnings of one side's records, each kind told once, and the context fields its pooled runs differ in."""
    # one line per kind of warning, not one per process: five processes with a wide CV are one fact
    per_record = [list(dict.fromkeys(str(w) for w in record.warnings or [])) for record in records]
    out = [f"{label}: {text}" for text in alike([w for found in per_record for w in found], len(records))]
    for name in CONTEXT_FIELDS:
        if name in by:
            continue
        seen = sorted({str(getattr(r, name)) for r in records})
        if len(seen) > 1:
            out.append(f"{label}: pooled runs differ in {name} ({', '.join(seen)})")
    return out


def busy_records(records: list[Result]) -> list[tuple[Result, list[str]]]:
    """The records whose captured machine state says the machine was busy, each with the reasons."""

    out = []
    for record in records:
        reasons = busy_reasons(record.env, record.device)
        if reasons:
            out.append((record, reasons))
    return out


def busy_warning(label: str, records: list[Result]) -> str | None:
    """How many of a side's processes ran on a busy machine, and why, or None."""
    busy = busy_records(records)
    if not busy:
        return None
    reasons = alike([reason for _, found in busy for reason in found], 1)
    return f"{label}: busy machine in {len(busy)} of {len(records)} process(es) ({'; '.join(reasons)})"


def host_of(record: Result) -> str | None:
    """The machine a record was measured on: its Slurm node where a job ran it, else the host the worker saw."""
    slurm = record.note("slurm")
    node = slurm.get("node") if isinstance(slurm, dict) else None  # a note, as the Slurm executor wrote it
    return node or record.env.hostname


def _hosts_warning(base_label: str, base: list[Result], value_label: str, value: list[Result],
                   by: list[str]) -> list[str]:
    """A comparison whose sides were measured on different machines says so (unless the machines are compared)."""
    if {"device", "device_name"} & set(by):
        return []
    hosts_base = {h for h in map(host_of, base) if h}
    hosts_value = {h for h in map(host_of, value) if h}
    if not hosts_base or not hosts_value or hosts_base == hosts_value:
        return []
    return [f"{base_label} and {value_label} ran on different machines ({', '.join(sorted(hosts_base))} against "
            f"{', '.join(sorted(hosts_value))}): the difference may be the machines'"]


def _copies_each_step(records: list[Result]) -> bool | None:
    """Whether a side's runs copy their batch host to device every step (their api.input_pipeline says so),
    False where they say not, None where none of them says (records from before the field)."""
    said = [pipe.get("copy_per_step") for r in records
            if isinstance(pipe := (r.api or {}).get("input_pipeline"), dict) and "copy_per_step" in pipe]
    return any(said) if said else None


def _copy_warning(base_label: str, base: list[Result], value_label: str, value: list[Result]) -> list[str]:
    """A side that copies its batch every step (Keras fit under `inputs: device`) beside one whose batch stays
    on the device is marked: the difference includes a copy only one side pays."""
    base_copies, value_copies = _copies_each_step(base), _copies_each_step(value)
    if base_copies is None or value_copies is None or base_copies == value_copies:
        return []
    copier, resident = (value_label, base_label) if value_copies else (base_label, value_label)
    return [f"{copier} copies its batch from host to device every step (Keras fit feeds `inputs: device` through "
            f"tf.data), where {resident}'s stays on the device: compare `inputs: host` on every side for like with like"]


def row_warnings(base_label: str, base: list[Result], value_label: str, value: list[Result],
                 by: list[str]) -> tuple[bool, str]:
    """A comparison row's `busy` (either side's machine was busy) and `warnings` (each told once), from the
    records of its two sides."""
    warnings = (_hosts_warning(base_label, base, value_label, value, by)
                + _copy_warning(base_label, base, value_label, value)
                + side_warnings(base_label, base, by) + side_warnings(value_label, value, by))
    busy = [w for w in (busy_warning(base_label, base), busy_warning(value_label, value)) if w]
    return bool(busy), "; ".join(dict.fromkeys(busy + warnings))
