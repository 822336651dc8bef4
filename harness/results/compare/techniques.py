"""Technique speedups: each technique value (bf16, compiled, channels_last) against its baseline value."""

from __future__ import annotations

from harness.errors import InputError
from harness.results.compare.pairing import compare
from harness.results.compare.records import ok_records
from harness.workloads import WORKLOADS


def technique_baselines() -> dict:
    """Each technique parameter and the value it is measured against, as the workloads declare them."""

    out: dict = {}
    for workload in WORKLOADS.values():
        for technique, value in workload.technique_baselines.items():
            out.setdefault(technique, value)
    return out


def _workload_frames(records: list, technique: str, default) -> list:
    """One comparison by the technique per workload that measured it at two values or more."""
    frames = []
    for workload in dict.fromkeys(r.workload for r in records):
        subset = [r for r in records if r.workload == workload]
        values = {str(v) for v in ((r.params or {}).get(technique) for r in subset) if v is not None}
        if len(values) < 2:
            continue
        try:
            frames.append(compare(subset, [technique], default if default in values else None))
        except InputError:  # no two runs differ only in this technique
            continue
    return frames


def technique_speedups(records) -> dict:
    """Each technique value against its baseline value (fp32, eager, none, channels_first): a frame per technique.

    Computed per workload; where the usual baseline was not measured, the first value seen is the
    baseline. A technique measured at a single value is left out.
    """
    # deferred on purpose: `harness run` imports this package for its tables, and pandas is slow to import
    import pandas as pd

    records = ok_records(records)
    out = {}
    for technique, default in technique_baselines().items():
        frames = _workload_frames(records, technique, default)
        if frames:
            out[technique] = pd.concat(frames, ignore_index=True)
    return out
