"""What the datasheets expect of one device against another: the ratio a device comparison is read beside."""

from __future__ import annotations

from harness.machine.peaks import datasheet
from harness.results.record import Result
from harness.workloads import WORKLOADS

#: Columns a comparison by device has after the result columns.
DATASHEET_COLUMNS = ("datasheet_ratio", "datasheet")


def peak_precision(record: Result) -> str | None:
    """The precision whose datasheet peak applies to a record's run (None where unknown)."""
    params = record.params or {}
    try:
        workload = WORKLOADS[record.workload]
        return workload.peak_precision(workload.validate(params))
    except Exception:  # an unknown or older workload: read the neutral name directly
        precision = record.param("precision")
        return str(precision).replace("amp_", "") if precision else None


def datasheet_ratio(name_value: str | None, name_baseline: str | None, precision: str | None,
                    size_value: dict | None = None, size_baseline: dict | None = None) -> tuple[float | None, str | None]:
    """Datasheet peak of one device over another for a precision, with its working; (None, None) if unknown.

    `size_*` (memory_bytes, sm_count) tell apart the variants a name alone leaves ambiguous."""

    sheet_v, sheet_b = datasheet(name_value, **(size_value or {})), datasheet(name_baseline, **(size_baseline or {}))
    if not (sheet_v and sheet_b and precision):
        return None, None
    peak_v, peak_b = sheet_v.get(precision), sheet_b.get(precision)
    if not peak_v or not peak_b:
        return None, None
    ratio = peak_v / peak_b
    return ratio, f"{sheet_v['model']} / {sheet_b['model']} {precision}: {peak_v:g} / {peak_b:g} = {ratio:.2f}"


def datasheet_columns(base_records: list[Result], value_records: list[Result]) -> tuple[float | None, str | None]:
    """A device comparison row's datasheet_ratio and datasheet: known where each side ran on one device model."""
    names_b = {r.device_name for r in base_records}
    names_v = {r.device_name for r in value_records}
    precision = peak_precision(base_records[0])
    sheet = (None, None)
    if len(names_b) == 1 and len(names_v) == 1:
        sheet = datasheet_ratio(next(iter(names_v)), next(iter(names_b)), precision,
                                value_records[0].gpu_size(), base_records[0].gpu_size())
    return sheet
