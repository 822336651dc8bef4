"""Technique speedups: each technique value (bf16, compiled, channels_last) against its baseline value."""

from __future__ import annotations

from harness.errors import InputError
from harness.results.compare.pairing import comparison_rows
from harness.results.compare.records import ok_records
from harness.results.compare.row import ComparisonRow
from harness.workloads import WORKLOADS


def technique_baselines() -> dict:
    """Each technique parameter and the value it is measured against, as the workloads declare them."""

    out: dict = {}
    for workload in WORKLOADS.values():
        for technique, value in workload.technique_baselines.items():
            out.setdefault(technique, value)
    return out


def _workload_rows(records: list, technique: str, default) -> list[ComparisonRow]:
    """The rows of one comparison by the technique per workload that measured it at two values or more."""
    rows = []
    for workload in dict.fromkeys(r.workload for r in records):
        subset = [r for r in records if r.workload == workload]
        values = {str(v) for v in (r.param(technique) for r in subset) if v is not None}
        if len(values) < 2:
            continue
        try:
            rows += comparison_rows(subset, [technique], default if default in values else None)
        except InputError:  # no two runs differ only in this technique
            continue
    return rows


def technique_speedups(records) -> dict[str, list[ComparisonRow]]:
    """Each technique value against its baseline value (fp32, eager, none, channels_first): the comparison rows of
    each technique.

    Computed per workload; where the usual baseline was not measured, the first value seen is the
    baseline. A technique measured at a single value is left out.
    """
    records = ok_records(records)
    out = {}
    for technique, default in technique_baselines().items():
        rows = _workload_rows(records, technique, default)
        if rows:
            out[technique] = rows
    return out
