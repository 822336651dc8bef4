"""Comparison of stored results: is A faster than B, by how much, and how sure are we.

Pure functions over result records (dicts, or the DataFrame `harness.load_results` gives). Records
are matched on every identifying field except the ones compared (a backend's non-default options
included), so only the compared field differs.

Each record is one worker process, and a process is the unit of the comparison: it gives one
sample, its median over its timed blocks. Blocks inside one process share its allocator state,
clocks, autotuning and placement, so they say how steady that process was and nothing about the
next one; pooling them as independent samples made two runs of one configuration "differ" at
p = 0.008. The ratio's CI is a bootstrap over processes, the test a Mann-Whitney U over process
medians, and a verdict needs enough processes per side, p < alpha, a CI that excludes 1 and a
change of at least the minimum effect (README, "Statistics").
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable

from harness.errors import InputError
from harness.machine.envcheck import busy_reasons
from harness.machine.peaks import datasheet, gpu_size
from harness.results import stats
from harness.results.store import Store, default_store_path
from harness.seam.backend import available_backends, backend_names
from harness.workloads import WORKLOADS

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

    out: dict = {}
    for workload in WORKLOADS.values():
        for technique, value in workload.technique_baselines.items():
            out.setdefault(technique, value)
    return out


def _canonical_backend(name: str) -> str:
    """The canonical spelling of a backend or backend variant (`tf[keras=keras3]` -> `tensorflow[keras=keras3]`)."""

    name = name.strip()
    head, bracket, rest = name.partition("[")
    return backend_names().get(head.strip().lower(), head.strip()) + (bracket + rest if bracket else "")


_OPTION_DEFAULTS: dict[tuple, dict] = {}


def option_defaults(backend: str | None) -> dict:
    """A backend's options at their defaults ({} for a backend that is not registered here or has none)."""
    import os

    key = (os.environ.get("HARNESS_BACKENDS") or "", backend)  # the registry depends on it
    if key not in _OPTION_DEFAULTS:
        defaults: dict = {}
        try:
            known = available_backends().get(backend)
            if known is not None:
                defaults = known.options_model().model_dump()
        except Exception:  # a backend whose options cannot be built empty: every option counts
            defaults = {}
        _OPTION_DEFAULTS[key] = defaults
    return _OPTION_DEFAULTS[key]


def backend_options(record: dict) -> dict:
    """The record's backend options that differ from their defaults, sorted by name ({} for older records)."""
    options = record.get("options") or {}
    if not isinstance(options, dict):
        return {}
    defaults = option_defaults(record.get("backend"))
    return {k: options[k] for k in sorted(options) if k not in defaults or options[k] != defaults[k]}


def backend_variant(record: dict) -> str | None:
    """The backend with its non-default options: `torch`, `tensorflow[keras=keras3]`, `torch[compile_mode=max-autotune]`.

    Two records that differ in options are different configurations: they are never pooled.
    """
    backend = record.get("backend")
    options = backend_options(record)
    if backend is None or not options:
        return backend
    return f"{backend}[{','.join(f'{k}={v}' for k, v in options.items())}]"


#: A difference is significant when the Mann-Whitney p-value over processes is below this.
ALPHA = 0.05
#: The smallest change (in percent of the baseline) called faster or slower; `--min-effect` changes it.
MIN_EFFECT_PCT = 2.0

FASTER, SLOWER, SAME = "faster", "slower", "no difference found"
#: Kept for callers of older versions: a row whose sides gave no value at all (not produced any more).
UNTESTED = "not tested: too few samples"
#: Every verdict that is neither a difference nor its absence starts with this.
INCONCLUSIVE = "inconclusive"
#: Shown after the verdict of a row whose records say their machine was busy.
BUSY_NOTE = "(busy machine)"
#: ci_basis values: the ratio's CI came from a bootstrap over processes, or from one process's blocks.
CI_PROCESSES, CI_WITHIN = "processes", "within-process"


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
    "ratio_ci_low", "ratio_ci_high", "ci_basis", "change_pct", "p_value", "verdict", "baseline_runs", "value_runs",
    "baseline_samples", "value_samples", "baseline_cv", "value_cv", "higher_is_better", "busy", "warnings",
)
DATASHEET_COLUMNS = ("datasheet_ratio", "datasheet")
#: Columns of a comparison by a workload's replicas parameter (docs/distributed.md).
SCALING_COLUMNS = ("scaling_efficiency",)


def scaling_efficiency_of(record_base: dict, record_value: dict, ratio) -> float | None:
    """rate(R) / (R x rate(1)) generalised to any two replica counts: the per-replica rate of the larger count
    over that of the smaller, whichever side is the baseline, for a throughput (higher is better) compared
    by the workload's replicas parameter; else None."""

    workload = WORKLOADS.get(record_base.get("workload"))
    name = getattr(workload, "replicas_param", None)
    if not name or _missing(ratio):
        return None
    base_r, value_r = record_params(record_base).get(name), record_params(record_value).get(name)
    if not base_r or not value_r or base_r == value_r:
        return None
    if base_r > value_r:  # a baseline of more replicas (named with --baseline): the larger count's efficiency still
        return (1.0 / ratio) * value_r / base_r if ratio else None
    return ratio * base_r / value_r


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
    """A record's value of a comparable field: a record field or a neutral parameter.

    `backend` is the backend with its non-default options (`tensorflow[keras=tf_keras]`).
    """
    if name == "backend":
        return backend_variant(record)
    if name in BY_FIELDS or name in KEY_FIELDS:
        return record.get(name)
    return record_params(record).get(name)


def record_params(record: dict) -> dict:
    """A record's params, with its workload's quiet defaults (`replicas: 1`) filled where an older
    record lacks them, so it matches the records made since."""
    params = record.get("params") or {}

    quiet = getattr(WORKLOADS.get(record.get("workload")), "quiet_defaults", None) or {}
    missing = {k: v for k, v in quiet.items() if k not in params}
    return {**params, **missing} if missing else params


def known_fields(records: list[dict]) -> list[str]:
    """Every field `--by` can name for these records."""
    params = sorted({k for r in records for k in record_params(r)})
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
    if "backend" not in freed:  # options belong to the backend: compared with it, else part of the match
        options = backend_options(record)
        if options:
            key.append(("options", _hashable(options)))
    params = record_params(record)
    key += [(f"params.{k}", _hashable(params[k])) for k in sorted(params) if k not in freed]
    return tuple(key)


def _replicas_order(value) -> float:
    """A replicas value as a number for ordering (one-field keys come as 1-tuples); unknown last."""
    v = value[0] if isinstance(value, tuple) and len(value) == 1 else value
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.inf


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
    """A record's samples of the metric: its timed blocks for the headline, else its one value."""
    if metric == "median":
        samples = [float(s) for s in record.get("samples") or [] if not _missing(s)]
        if samples:
            return samples
    value = record.get(metric)
    return [] if _missing(value) else [float(value)]


def process_value(record: dict, metric: str = "median") -> float | None:
    """The one sample a record (one worker process) gives a comparison: the median of its blocks, or its value."""
    values = _values(record, metric)
    return stats.median(values) if values else None


def _peak_precision(record: dict) -> str | None:
    params = record.get("params") or {}
    try:
        workload = WORKLOADS[record.get("workload")]
        return workload.peak_precision(workload.validate(params))
    except Exception:  # an unknown or older workload: read the neutral name directly
        precision = params.get("precision")
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


def _alike(texts: list[str], total: int) -> list[str]:
    """Texts that differ only in their figures told once, with how many of `total` processes gave one."""
    groups: dict[str, list[str]] = {}
    for text in texts:
        groups.setdefault(re.sub(r"[0-9][0-9.,]*", "#", text), []).append(text)
    out = []
    for found in groups.values():
        out.append(found[0] if total <= 1 else f"{found[0]} ({len(found)} of {total} processes)")
    return out


def _side_warnings(label: str, records: list[dict], by: list[str]) -> list[str]:
    # one line per kind of warning, not one per process: five processes with a wide CV are one fact
    per_record = [list(dict.fromkeys(str(w) for w in record.get("warnings") or [])) for record in records]
    out = [f"{label}: {text}" for text in _alike([w for found in per_record for w in found], len(records))]
    for name in CONTEXT_FIELDS:
        if name in by:
            continue
        seen = sorted({str(r.get(name)) for r in records})
        if len(seen) > 1:
            out.append(f"{label}: pooled runs differ in {name} ({', '.join(seen)})")
    return out


def busy_records(records: list[dict]) -> list[tuple[dict, list[str]]]:
    """The records whose captured machine state says the machine was busy, each with the reasons."""

    out = []
    for record in records:
        env = record.get("env")
        reasons = busy_reasons(env if isinstance(env, dict) else {}, record.get("device"))
        if reasons:
            out.append((record, reasons))
    return out


def _busy_warning(label: str, records: list[dict]) -> str | None:
    busy = busy_records(records)
    if not busy:
        return None
    reasons = _alike([reason for _, found in busy for reason in found], 1)
    return f"{label}: busy machine in {len(busy)} of {len(records)} process(es) ({'; '.join(reasons)})"


def _plural(n: int) -> str:
    return f"{n} process" + ("" if n == 1 else "es")


def inconclusive_reason(n_base: int, n_value: int, alpha: float = ALPHA) -> str | None:
    """Why n_base against n_value processes cannot give a verdict at alpha; None when they can.

    An exact Mann-Whitney test cannot go below 2 / C(n_base + n_value, n_base), reached when the
    sides do not overlap at all: with 3 processes a side that is 0.1, so no p < 0.05 can exist.
    """
    if stats.min_p_value(n_base, n_value) < alpha:
        return None
    need = stats.processes_needed(alpha)
    sides = f"{_plural(n_base)} per side" if n_base == n_value else f"{n_base} against {_plural(n_value)}"
    return f"{INCONCLUSIVE}: {sides} cannot reach p < {alpha:g}; use at least {need}" + (
        "" if n_base == n_value else " per side")


def _verdict(n_base: int, n_value: int, ratio, low, high, p_value, words: tuple[str, str],
             alpha: float, min_effect: float) -> str:
    if ratio is None:
        return UNTESTED
    reason = inconclusive_reason(n_base, n_value, alpha)
    if reason:
        return reason
    if p_value is None or low is None or high is None:
        return f"{INCONCLUSIVE}: the processes gave no p-value"
    if p_value >= alpha or low <= 1.0 <= high:
        return SAME
    change = 100.0 * (ratio - 1.0)
    if abs(change) < min_effect:
        return f"{SAME}: {change:+.1f}% is under the {min_effect:g}% minimum effect"
    return words[0] if ratio > 1.0 else words[1]


def is_difference(verdict) -> bool:
    """Whether a verdict says the two sides differ (faster/slower, more/less), not that no difference was found."""
    return isinstance(verdict, str) and not verdict.startswith((SAME, INCONCLUSIVE, UNTESTED))


def _side(records: list[dict], metric: str) -> tuple[list[dict], list[float], list[float]]:
    """(records with a value, one value per process, every block pooled)."""
    kept = [r for r in records if process_value(r, metric) is not None]
    return kept, [process_value(r, metric) for r in kept], [x for r in kept for x in _values(r, metric)]


def compare(records, by: list[str], baseline: str | None = None, metric: str = "median", *,
            min_effect: float = MIN_EFFECT_PCT, alpha: float = ALPHA):
    """A pandas DataFrame, one row per (match group, compared value) against the baseline value.

    Only status-ok records take part, and each is one process: one sample, its median (or its value
    of `metric`). `ratio` is value / baseline of the medians of those samples; its CI a bootstrap
    over processes (`ci_basis` "processes"), or, with one process on each side, over the blocks of
    those two processes ("within-process": it leaves the between-process spread out, and no
    verdict rests on it). `verdict`: faster/slower only when each side has enough processes for a
    Mann-Whitney p below `alpha` to exist, p < alpha, the CI excludes 1 and |change| >= `min_effect`
    percent; else "no difference found" or "inconclusive: ..." saying why. `busy` marks rows whose
    records say their machine was busy. InputError on an unknown field, metric or baseline, or when
    nothing can be matched.
    """
    import pandas as pd

    if metric not in METRICS:
        raise InputError(f"--metric {metric}: expected one of {', '.join(METRICS)}", field="--metric")
    if min_effect is None or not (min_effect >= 0):
        raise InputError(f"--min-effect {min_effect}: expected a percentage >= 0", field="--min-effect")
    records = ok_records(records)
    if not records:
        raise InputError("no results with status ok to compare")
    by = parse_by([by] if isinstance(by, str) else by)
    _check_by(by, records)
    # a record without a compared parameter (gemm has no batch_size) has nothing to compare
    params_by = [f for f in by if f not in BY_FIELDS]
    records = [r for r in records if all(f in record_params(r) for f in params_by)]

    # the order values are first seen in (records come oldest first) sets the default baseline
    order: list[tuple] = []
    groups: dict[tuple, dict[tuple, list[dict]]] = {}
    for record in records:
        value = tuple(_hashable(field_value(record, f)) for f in by)
        if value not in order:
            order.append(value)
        groups.setdefault(_match_key(record, by), {}).setdefault(value, []).append(record)

    wanted = _resolve_baseline(baseline, by, order) if baseline is not None else None

    by_device = any(f in ("device", "device_name") for f in by)

    # by the replicas parameter alone, a throughput's rows say how well it scaled (global rate / R x rate at 1)
    by_scaling = metric == "median" and len(by) == 1 and any(
        getattr(WORKLOADS.get(r.get("workload")), "replicas_param", None) == by[0] for r in records[:1])
    rows = []
    for key, sides in groups.items():
        if len(sides) < 2:
            continue
        if wanted is not None:
            if wanted not in sides:
                continue
            base_value = wanted
        elif by_scaling:  # the fewest replicas is the baseline, whichever ran first
            base_value = min(sides, key=lambda v: (_replicas_order(v), order.index(v)))
        else:
            base_value = min(sides, key=order.index)
        base_records, base_proc, base_blocks = _side(sides[base_value], metric)
        if not base_proc:
            continue
        unit = base_records[0].get("unit") if metric == "median" else metric
        higher = _direction(metric, base_records[0].get("unit"))
        words = METRICS[metric][1]
        if not higher and metric == "median":
            words = (SLOWER, FASTER)
        for value in sorted((v for v in sides if v != base_value), key=order.index):
            value_records, value_proc, value_blocks = _side(sides[value], metric)
            if not value_proc:
                continue
            n_base, n_value = len(base_proc), len(value_proc)
            base_median, value_median = stats.median(base_proc), stats.median(value_proc)
            ratio = value_median / base_median if base_median else None
            low = high = basis = None
            if n_base >= 2 and n_value >= 2:
                _, low, high = stats.ratio_ci(value_proc, base_proc)
                basis = CI_PROCESSES
            elif n_base == 1 and n_value == 1 and len(base_blocks) >= 2 and len(value_blocks) >= 2:
                _, low, high = stats.ratio_ci(value_blocks, base_blocks)
                basis = CI_WITHIN
            if ratio is None:
                low = high = basis = None
            p_value = stats.mann_whitney(value_proc, base_proc)
            row = {name.removeprefix("params."): v for name, v in key}
            warnings = _side_warnings(_label(base_value), base_records, by) + _side_warnings(_label(value), value_records, by)
            busy = [w for w in (_busy_warning(_label(base_value), base_records),
                                _busy_warning(_label(value), value_records)) if w]
            row.update(
                compared=",".join(by),
                baseline=_label(base_value),
                value=_label(value),
                metric=base_records[0].get("metric") if metric == "median" else metric,
                unit=unit,
                baseline_median=base_median,
                value_median=value_median,
                ratio=ratio,
                ratio_ci_low=low,
                ratio_ci_high=high,
                ci_basis=basis,
                change_pct=None if ratio is None else 100.0 * (ratio - 1.0),
                p_value=p_value,
                verdict=_verdict(n_base, n_value, ratio, low if basis == CI_PROCESSES else None,
                                 high if basis == CI_PROCESSES else None, p_value, words, alpha, min_effect),
                baseline_runs=n_base,
                value_runs=n_value,
                baseline_samples=len(base_blocks),
                value_samples=len(value_blocks),
                baseline_cv=stats.cv(base_proc),
                value_cv=stats.cv(value_proc),
                higher_is_better=higher,
                busy=bool(busy),
                warnings="; ".join(dict.fromkeys(busy + warnings)),
            )
            if by_scaling:
                row["scaling_efficiency"] = scaling_efficiency_of(base_records[0], value_records[0], ratio)
            if by_device:
                names_b = {r.get("device_name") for r in base_records}
                names_v = {r.get("device_name") for r in value_records}
                precision = _peak_precision(base_records[0])
                sheet = (None, None)
                if len(names_b) == 1 and len(names_v) == 1:
                    sheet = datasheet_ratio(next(iter(names_v)), next(iter(names_b)), precision,
                                            gpu_size(value_records[0]), gpu_size(base_records[0]))
                row.update(datasheet_ratio=sheet[0], datasheet=sheet[1])
            rows.append(row)

    if not rows:
        values = ", ".join(repr(_label(v)) for v in order)
        raise InputError(
            f"--by {','.join(by)}: no two ok results differ only in {', '.join(by)} (values seen: {values})",
            field="--by",
        )
    frame = pd.DataFrame(rows)
    tail = (list(RESULT_COLUMNS) + (list(DATASHEET_COLUMNS) if by_device else [])
            + (list(SCALING_COLUMNS) if by_scaling else []))
    head = [c for c in frame.columns if c not in tail]
    return frame[head + tail]


def _resolve_baseline(baseline: str, by: list[str], order: list[tuple]) -> tuple:
    """The compared value `--baseline` names; a backend without options names its one variant if it has one."""
    wanted = _baseline_values(str(baseline), by)
    matching = [v for v in order if tuple(str(x) for x in v) == wanted]
    if not matching and "backend" in by:
        i = by.index("backend")
        others = [j for j in range(len(by)) if j != i]

        def fits(v: tuple) -> bool:
            return (str(v[i]).split("[", 1)[0] == wanted[i]
                    and all(str(v[j]) == wanted[j] for j in others))

        matching = [v for v in order if fits(v)]
        if len(matching) > 1:
            names = ", ".join(repr(_label(v)) for v in matching)
            raise InputError(f"--baseline {baseline}: several variants match ({names}); name one", field="--baseline")
    if not matching:
        seen = ", ".join(repr(_label(v)) for v in order)
        raise InputError(f"--baseline {baseline}: no result has it for {', '.join(by)} (seen: {seen})", field="--baseline")
    return matching[0]


def fastest_configurations(records, metric: str = "median") -> list[dict]:
    """Per workload and backend variant, its fastest configuration: the one with the best median over processes.

    Each dict: workload, backend (variant), config (the params, and the device, that differ among
    that variant's configurations of the workload: what makes this one the fastest), median, unit,
    processes, configurations (how many were measured). Only for rate and time metrics.
    """
    if metric not in METRICS or set(METRICS[metric][1]) != {FASTER, SLOWER}:
        return []
    records = ok_records(records)
    out = []
    for workload in dict.fromkeys(r.get("workload") for r in records):
        subset = [r for r in records if r.get("workload") == workload]
        for variant in dict.fromkeys(backend_variant(r) for r in subset):
            mine = [r for r in subset if backend_variant(r) == variant and process_value(r, metric) is not None]
            if not mine:
                continue
            configs: dict[tuple, list[dict]] = {}
            for r in mine:
                key = (r.get("device"), _hashable(r.get("params") or {}))
                configs.setdefault(key, []).append(r)
            unit = mine[0].get("unit") if metric == "median" else metric
            higher = _direction(metric, mine[0].get("unit"))
            scored = [(stats.median([process_value(r, metric) for r in rs]), rs) for rs in configs.values()]
            best, best_records = (max if higher else min)(scored, key=lambda item: item[0])
            params = best_records[0].get("params") or {}
            varying = [k for k in params if len({_hashable((r.get("params") or {}).get(k)) for r in mine}) > 1]
            config = {}
            if len({r.get("device") for r in mine}) > 1:
                config["device"] = best_records[0].get("device")
            config.update({k: params[k] for k in varying})
            out.append(dict(workload=workload, backend=variant, config=config, median=best, unit=unit,
                            processes=len(best_records), configurations=len(configs)))
    return out


def describe_fastest(rows: list[dict]) -> list[str]:
    """One line per backend variant and workload naming its fastest configuration, with its median and unit."""
    lines = []
    for row in rows:
        if row["configurations"] > 1:
            what = ", ".join(f"{k}={v}" for k, v in row["config"].items()) or "(configurations alike)"
            of = f"fastest of {row['configurations']} configurations"
        else:
            what, of = "its only configuration", "1 configuration"
        lines.append(f"fastest {row['backend']} on {row['workload']}: {what}: {_fmt(row['median'])} {row['unit'] or ''}"
                     f" (median of {_plural(row['processes'])}; {of})")
    return lines


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


def _true(value) -> bool:
    return not _missing(value) and bool(value)


def _p(value) -> str:
    if _missing(value):
        return "-"
    return "<0.0001" if value < 1e-4 else f"{value:.4f}"


def display_rows(table) -> tuple[dict, list[dict]]:
    """(fields common to every row, one formatted row per comparison) for people to read."""
    rows = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    if not rows:
        return {}, []
    result = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS) | set(SCALING_COLUMNS)
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
        if ci and r.get("ci_basis") == CI_WITHIN:
            ci += f" {CI_WITHIN}"
        row["ratio [95% CI]"] = f"{_fmt(r['ratio'])}{ci}"
        row["change"] = "-" if _missing(r.get("change_pct")) else f"{r['change_pct']:+.1f}%"
        row["p"] = _p(r.get("p_value"))
        row["verdict"] = r["verdict"] + (f" {BUSY_NOTE}" if _true(r.get("busy")) else "")
        row["processes"] = f"{r['baseline_runs']} vs {r['value_runs']}"
        if "datasheet_ratio" in r:
            row["datasheet ratio"] = r.get("datasheet") or "-"
        if "scaling_efficiency" in r:
            eff = r.get("scaling_efficiency")
            row["scaling efficiency"] = "-" if _missing(eff) else f"{100 * eff:.1f}%"
        row["warnings"] = r.get("warnings") or ""
        out.append(row)
    return common, out


def describe_common(common: dict) -> str:
    """One line naming what every compared row has in common."""
    compared = common.get("compared")
    rest = ", ".join(f"{k}={v}" for k, v in common.items() if k != "compared")
    return f"compared: {compared}" + (f"; every row: {rest}" if rest else "")


def table_notes(table) -> list[str]:
    """Lines to print under a displayed comparison: what a within-process CI or a busy mark means."""
    rows = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    notes = []
    if any(r.get("ci_basis") == CI_WITHIN for r in rows):
        notes.append(f"{CI_WITHIN}: one process per side, so the CI comes from the timed blocks of those two "
                     "processes; it leaves out the spread between processes and no verdict rests on it.")
    if any(_true(r.get("busy")) for r in rows):
        notes.append(f"{BUSY_NOTE}: some records were measured while the load average exceeded the cores or "
                     "other processes computed on their GPU (see warnings); rerun on a quiet machine.")
    return notes
