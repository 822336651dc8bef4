"""Comparison of stored results: is A faster than B, by how much, and how sure are we.

Pure functions over result records (dicts, or the DataFrame `harness.load_results` gives). Records
are matched on every identifying field except the ones compared, so only the compared field
differs; repeated runs of one configuration are pooled.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

from harness import stats
from harness.errors import InputError

#: Record fields that may be compared (`--by`), beside any neutral parameter.
BY_FIELDS = ("backend", "device", "device_name", "framework_version", "session_id", "scenario")
#: Record fields that identify a configuration; records match when all of these agree (except `by`).
KEY_FIELDS = ("workload", "scenario", "metric", "backend", "device", "device_name")
#: Fields that name the same thing as another: comparing one frees the other from the match.
LINKED = {"device": ("device_name",), "device_name": ("device",), "backend": ("framework_version",)}
#: Fields that do not identify a configuration but should agree between matched runs.
CONTEXT_FIELDS = ("framework_version", "device_name", "device")


def technique_baselines() -> dict:
    """Each technique parameter and the value it is measured against, as the workloads declare them."""
    from harness.workloads import WORKLOADS

    out: dict = {}
    for workload in WORKLOADS.values():
        for technique, value in workload.technique_baselines.items():
            out.setdefault(technique, value)
    return out


def _canonical_backend(name: str) -> str:
    from harness.backend import backend_names

    return backend_names().get(name.strip().lower(), name)

#: A difference is significant when the Mann-Whitney p-value is below this and the ratio CI excludes 1.
ALPHA = 0.05

FASTER, SLOWER, SAME, UNTESTED = "faster", "slower", "no significant difference", "not tested: too few samples"


#: metric name -> (higher is better, verdict words for higher/lower). `median` is the headline, on raw samples.
METRICS: dict[str, tuple[bool | None, tuple[str, str]]] = {
    "median": (None, (FASTER, SLOWER)),
    "tflops": (True, (FASTER, SLOWER)),
    "pct_of_peak": (True, (FASTER, SLOWER)),
    "step_time_s": (False, (SLOWER, FASTER)),
    "first_step_s": (False, (SLOWER, FASTER)),
    "peak_allocated_bytes": (False, ("more", "less")),
    "device_used_bytes": (False, ("more", "less")),
    "host_peak_rss_bytes": (False, ("more", "less")),
    "energy_j": (False, ("more", "less")),
    "avg_power_w": (False, ("more", "less")),
}

#: Columns every comparison row has, after the match key's columns.
RESULT_COLUMNS = (
    "compared", "baseline", "value", "metric", "unit", "baseline_median", "value_median", "ratio",
    "ratio_ci_low", "ratio_ci_high", "change_pct", "p_value", "verdict", "baseline_runs", "value_runs",
    "baseline_samples", "value_samples", "higher_is_better", "warnings",
)
DATASHEET_COLUMNS = ("datasheet_ratio", "datasheet")


# --------------------------------------------------------------------------- records in
def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def as_records(records) -> list[dict]:
    """A list of record dicts from records or a DataFrame (pandas NaN becomes None)."""
    if hasattr(records, "to_dict"):
        records = records.to_dict(orient="records")
    return [{k: (None if _missing(v) else v) for k, v in r.items()} for r in records]


def ok_records(records) -> list[dict]:
    """The records with status ok (the only ones whose figures mean anything), capacity probes left out.

    A capacity probe (`probe_of`) ran one step to see whether a batch fits; its figures are not a
    measurement to compare.
    """
    return [r for r in as_records(records) if r.get("status") == "ok" and not r.get("probe_of")]


def load_records(store_path: str | None, sessions: Iterable[str] = ()) -> list[dict]:
    """Records of a store (of the given sessions; unique id prefixes accepted); InputError if none."""
    from harness.store import Store, default_store_path

    path = str(store_path or default_store_path())
    if not Path(path).exists():
        raise InputError(f"store {path}: no such file", source=path, field="--store")
    with Store(path, readonly=True) as store:
        full_ids = []
        for session in sessions:
            found = store.session(session)
            if found is None:
                ids = sorted({r["session_id"] for r in store.records() if str(r["session_id"]).startswith(session)})
                if len(ids) != 1:
                    known = ", ".join(s["session_id"] for s in store.sessions()) or "none"
                    raise InputError(
                        f"store {path}: no single session matches {session!r} (sessions: {known})",
                        source=path, field="--session",
                    )
                full_ids.append(ids[0])
            else:
                full_ids.append(found["session_id"])
        records = store.records(full_ids or None)
    if not records:
        what = f"sessions {', '.join(full_ids)}" if full_ids else "any session"
        raise InputError(f"store {path}: no results for {what}", source=path, field="--store")
    return records


# --------------------------------------------------------------------------- fields
def _hashable(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


def field_value(record: dict, name: str):
    """A record's value of a comparable field: a record field or a neutral parameter."""
    if name in BY_FIELDS or name in KEY_FIELDS:
        return record.get(name)
    return (record.get("params") or {}).get(name)


def known_fields(records: list[dict]) -> list[str]:
    """Every field `--by` can name for these records."""
    params = sorted({k for r in records for k in (r.get("params") or {})})
    return list(BY_FIELDS) + params


def parse_by(values: Iterable[str]) -> list[str]:
    """`--by` values, repeatable and comma-separated, as one list without duplicates."""
    out: list[str] = []
    for value in values:
        for name in str(value).split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out


def _check_by(by: list[str], records: list[dict]) -> None:
    if not by:
        raise InputError("--by: name at least one field to compare", field="--by")
    known = known_fields(records)
    for name in by:
        if name not in known:
            raise InputError(f"--by {name}: no such field; expected one of {', '.join(known)}", field="--by")


def _label(values: tuple) -> str:
    return " / ".join("-" if v is None else str(v) for v in values)


def _match_key(record: dict, by: list[str]) -> tuple:
    freed = set(by)
    for name in by:
        freed.update(LINKED.get(name, ()))
    key = [(f, _hashable(record.get(f))) for f in KEY_FIELDS if f not in freed]
    params = record.get("params") or {}
    key += [(f"params.{k}", _hashable(params[k])) for k in sorted(params) if k not in freed]
    return tuple(key)


def _baseline_values(baseline: str, by: list[str]) -> tuple[str, ...]:
    parts = [baseline] if len(by) == 1 else [p.strip() for p in baseline.replace("/", ",").split(",")]
    if len(parts) != len(by):
        raise InputError(
            f"--baseline {baseline!r}: give one value per --by field ({', '.join(by)}), separated by commas",
            field="--baseline",
        )
    return tuple(_canonical_backend(p) if f == "backend" else p for f, p in zip(by, parts))


# --------------------------------------------------------------------------- comparison
def _direction(metric: str, unit: str | None) -> bool:
    higher, _ = METRICS[metric]
    if higher is not None:
        return higher
    # the headline: a rate (images/s, TFLOP/s) is higher-better; a time is lower-better
    unit = (unit or "").strip().lower()
    return not (unit in ("s", "ms", "us", "ns") or unit.startswith("s/") or unit.endswith("seconds"))


def _values(record: dict, metric: str) -> list[float]:
    if metric == "median":
        samples = [float(s) for s in record.get("samples") or [] if not _missing(s)]
        if samples:
            return samples
    value = record.get(metric)
    return [] if _missing(value) else [float(value)]


def _peak_precision(record: dict) -> str | None:
    params = record.get("params") or {}
    try:
        from harness.workloads import WORKLOADS

        workload = WORKLOADS[record.get("workload")]
        return workload.peak_precision(workload.validate(params))
    except Exception:  # an unknown or older workload: read the neutral name directly
        precision = params.get("precision")
        return str(precision).replace("amp_", "") if precision else None


def datasheet_ratio(name_value: str | None, name_baseline: str | None, precision: str | None) -> tuple[float | None, str | None]:
    """Datasheet peak of one device over another for a precision, with its working; (None, None) if unknown."""
    from harness.peaks import datasheet

    sheet_v, sheet_b = datasheet(name_value), datasheet(name_baseline)
    if not (sheet_v and sheet_b and precision):
        return None, None
    peak_v, peak_b = sheet_v.get(precision), sheet_b.get(precision)
    if not peak_v or not peak_b:
        return None, None
    ratio = peak_v / peak_b
    return ratio, f"{sheet_v['model']} / {sheet_b['model']} {precision}: {peak_v:g} / {peak_b:g} = {ratio:.2f}"


def _side_warnings(label: str, records: list[dict], by: list[str]) -> list[str]:
    out = []
    for record in records:
        for warning in record.get("warnings") or []:
            out.append(f"{label}: {warning}")
    for name in CONTEXT_FIELDS:
        if name in by:
            continue
        seen = sorted({str(r.get(name)) for r in records})
        if len(seen) > 1:
            out.append(f"{label}: pooled runs differ in {name} ({', '.join(seen)})")
    return out


def _verdict(ratio, low, high, p_value, words: tuple[str, str]) -> str:
    if p_value is None or ratio is None or low is None:
        return UNTESTED
    if p_value < ALPHA and not (low <= 1.0 <= high):
        return words[0] if ratio > 1.0 else words[1]
    return SAME


def compare(records, by: list[str], baseline: str | None = None, metric: str = "median"):
    """A pandas DataFrame, one row per (match group, compared value) against the baseline value.

    Only status-ok records take part; records of one configuration are pooled. `ratio` is
    value / baseline of the metric's medians with a bootstrap CI; `verdict` is faster/slower only
    when the Mann-Whitney p < 0.05 and the ratio CI excludes 1. InputError on an unknown field,
    metric or baseline, or when nothing can be matched.
    """
    import pandas as pd

    if metric not in METRICS:
        raise InputError(f"--metric {metric}: expected one of {', '.join(METRICS)}", field="--metric")
    records = ok_records(records)
    if not records:
        raise InputError("no results with status ok to compare")
    by = parse_by([by] if isinstance(by, str) else by)
    _check_by(by, records)
    # a record without a compared parameter (gemm has no batch_size) has nothing to compare
    params_by = [f for f in by if f not in BY_FIELDS]
    records = [r for r in records if all(f in (r.get("params") or {}) for f in params_by)]

    # the order values are first seen in (records come oldest first) sets the default baseline
    order: list[tuple] = []
    groups: dict[tuple, dict[tuple, list[dict]]] = {}
    for record in records:
        value = tuple(_hashable(field_value(record, f)) for f in by)
        if value not in order:
            order.append(value)
        groups.setdefault(_match_key(record, by), {}).setdefault(value, []).append(record)

    wanted = None
    if baseline is not None:
        wanted = _baseline_values(str(baseline), by)
        matching = [v for v in order if tuple(str(x) for x in v) == wanted]
        if not matching:
            seen = ", ".join(repr(_label(v)) for v in order)
            raise InputError(f"--baseline {baseline}: no result has it for {', '.join(by)} (seen: {seen})", field="--baseline")
        wanted = matching[0]

    by_device = any(f in ("device", "device_name") for f in by)
    rows = []
    for key, sides in groups.items():
        if len(sides) < 2:
            continue
        if wanted is not None:
            if wanted not in sides:
                continue
            base_value = wanted
        else:
            base_value = min(sides, key=order.index)
        base_records = sides[base_value]
        base_samples = [x for r in base_records for x in _values(r, metric)]
        unit = base_records[0].get("unit") if metric == "median" else metric
        higher = _direction(metric, base_records[0].get("unit"))
        words = METRICS[metric][1]
        if not higher and metric == "median":
            words = (SLOWER, FASTER)
        for value in sorted((v for v in sides if v != base_value), key=order.index):
            value_records = sides[value]
            value_samples = [x for r in value_records for x in _values(r, metric)]
            if not base_samples or not value_samples:
                continue
            ratio, low, high = stats.ratio_ci(value_samples, base_samples)
            p_value = stats.mann_whitney(value_samples, base_samples)
            row = {name.removeprefix("params."): v for name, v in key}
            warnings = _side_warnings(_label(base_value), base_records, by) + _side_warnings(_label(value), value_records, by)
            row.update(
                compared=",".join(by),
                baseline=_label(base_value),
                value=_label(value),
                metric=base_records[0].get("metric") if metric == "median" else metric,
                unit=unit,
                baseline_median=stats.median(base_samples),
                value_median=stats.median(value_samples),
                ratio=ratio,
                ratio_ci_low=low,
                ratio_ci_high=high,
                change_pct=None if ratio is None else 100.0 * (ratio - 1.0),
                p_value=p_value,
                verdict=_verdict(ratio, low, high, p_value, words),
                baseline_runs=len(base_records),
                value_runs=len(value_records),
                baseline_samples=len(base_samples),
                value_samples=len(value_samples),
                higher_is_better=higher,
                warnings="; ".join(dict.fromkeys(warnings)),
            )
            if by_device:
                names_b = {r.get("device_name") for r in base_records}
                names_v = {r.get("device_name") for r in value_records}
                precision = _peak_precision(base_records[0])
                sheet = (None, None)
                if len(names_b) == 1 and len(names_v) == 1:
                    sheet = datasheet_ratio(next(iter(names_v)), next(iter(names_b)), precision)
                row.update(datasheet_ratio=sheet[0], datasheet=sheet[1])
            rows.append(row)

    if not rows:
        values = ", ".join(repr(_label(v)) for v in order)
        raise InputError(
            f"--by {','.join(by)}: no two ok results differ only in {', '.join(by)} (values seen: {values})",
            field="--by",
        )
    frame = pd.DataFrame(rows)
    tail = list(RESULT_COLUMNS) + (list(DATASHEET_COLUMNS) if by_device else [])
    head = [c for c in frame.columns if c not in tail]
    return frame[head + tail]


def technique_speedups(records) -> dict:
    """Each technique value against its baseline value (fp32, eager, none, channels_first): a frame per technique.

    Computed per workload; where the usual baseline was not measured, the first value seen is the
    baseline. A technique measured at a single value is left out.
    """
    import pandas as pd

    records = ok_records(records)
    out = {}
    for technique, default in technique_baselines().items():
        frames = []
        for workload in dict.fromkeys(r.get("workload") for r in records):
            subset = [r for r in records if r.get("workload") == workload]
            values = {str(v) for v in ((r.get("params") or {}).get(technique) for r in subset) if v is not None}
            if len(values) < 2:
                continue
            try:
                frames.append(compare(subset, [technique], default if default in values else None))
            except InputError:  # no two runs differ only in this technique
                continue
        if frames:
            out[technique] = pd.concat(frames, ignore_index=True)
    return out


def slowdown_pct(row) -> float | None:
    """By how many percent the value is slower than the baseline (negative: faster)."""
    ratio = row.get("ratio")
    if _missing(ratio) or ratio == 0:
        return None
    speed = ratio if row.get("higher_is_better", True) else 1.0 / ratio
    return 100.0 * (1.0 - speed)


def fail_if_slower(table, pct: float) -> list[dict]:
    """Rows that are significantly slower than their baseline by more than pct percent."""
    rows = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    out = []
    for row in rows:
        loss = slowdown_pct(row)
        if row.get("verdict") == SLOWER and loss is not None and loss > pct:
            out.append(row)
    return out


# --------------------------------------------------------------------------- display
def _fmt(value, digits: int = 4) -> str:
    if _missing(value):
        return "-"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.{digits}g}"
    return str(value)


def _p(value) -> str:
    if _missing(value):
        return "-"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def display_rows(table) -> tuple[dict, list[dict]]:
    """(fields common to every row, one formatted row per comparison) for people to read."""
    rows = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    if not rows:
        return {}, []
    result = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS)
    key_columns = [c for c in rows[0] if c not in result]
    common = {}
    varying = []
    for column in key_columns:
        seen = {repr(r.get(column)) for r in rows}
        if len(seen) == 1:
            if not _missing(rows[0].get(column)):
                common[column] = rows[0][column]
        else:
            varying.append(column)
    common["compared"] = rows[0]["compared"]
    out = []
    for r in rows:
        row = {c: _fmt(r.get(c)) for c in varying}
        row["baseline"] = r["baseline"]
        row["value"] = r["value"]
        row["baseline median"] = _fmt(r["baseline_median"])
        row["median"] = _fmt(r["value_median"])
        row["unit"] = r.get("unit") or ""
        ci = f" [{_fmt(r['ratio_ci_low'])}, {_fmt(r['ratio_ci_high'])}]" if not _missing(r.get("ratio_ci_low")) else ""
        row["ratio [95% CI]"] = f"{_fmt(r['ratio'])}{ci}"
        row["change"] = "-" if _missing(r.get("change_pct")) else f"{r['change_pct']:+.1f}%"
        row["p"] = _p(r.get("p_value"))
        row["verdict"] = r["verdict"]
        row["runs"] = f"{r['baseline_runs']} vs {r['value_runs']}"
        if "datasheet_ratio" in r:
            row["datasheet ratio"] = r.get("datasheet") or "-"
        row["warnings"] = r.get("warnings") or ""
        out.append(row)
    return common, out


def describe_common(common: dict) -> str:
    """One line naming what every compared row has in common."""
    compared = common.get("compared")
    rest = ", ".join(f"{k}={v}" for k, v in common.items() if k != "compared")
    return f"compared: {compared}" + (f"; every row: {rest}" if rest else "")
