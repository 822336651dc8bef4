"""Pairing records for a comparison: match groups, the baseline of each, and one row per compared value.

Records are matched on every identifying field except the ones compared (a backend's non-default
options included), so only the compared field differs. Each record is one worker process, and a
process is the unit of the comparison: it gives one sample, its median over its timed blocks.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from harness.errors import InputError
from harness.machine.envcheck import busy_reasons
from harness.results.compare.datasheet import DATASHEET_COLUMNS, datasheet_columns
from harness.results.compare.records import (
    BY_FIELDS,
    canonical_backend,
    field_value,
    hashable,
    known_fields,
    match_key,
    missing,
    ok_records,
    parse_by,
    process_value,
    record_params,
    sample_values,
)
from harness.results.compare.verdicts import (
    ALPHA,
    METRICS,
    MIN_EFFECT_PCT,
    higher_is_better,
    judge,
    verdict_words,
)
from harness.results.record import Result
from harness.seam.backend import BUILTIN_BACKENDS
from harness.timing import stats
from harness.workloads import WORKLOADS

#: Fields that do not identify a configuration but should agree between matched runs.
CONTEXT_FIELDS = ("framework_version", "device_name", "device")
#: ci_basis values: the ratio's CI came from a bootstrap over processes, or from one process's blocks.
CI_PROCESSES, CI_WITHIN = "processes", "within-process"

#: Columns every comparison row has, after the match key's columns.
RESULT_COLUMNS = (
    "compared", "baseline", "value", "metric", "unit", "baseline_median", "value_median", "ratio",
    "ratio_ci_low", "ratio_ci_high", "ci_basis", "change_pct", "p_value", "verdict", "baseline_runs", "value_runs",
    "baseline_samples", "value_samples", "baseline_cv", "value_cv", "higher_is_better", "busy", "warnings",
)
#: Columns of a comparison by a workload's replicas parameter (docs/distributed.md).
SCALING_COLUMNS = ("scaling_efficiency",)


def scaling_efficiency_of(record_base: Result, record_value: Result, ratio) -> float | None:
    """rate(R) / (R x rate(1)) generalised to any two replica counts: the per-replica rate of the larger count
    over that of the smaller, whichever side is the baseline, for a throughput (higher is better) compared
    by the workload's replicas parameter; else None."""

    workload = WORKLOADS.get(record_base.workload)
    name = getattr(workload, "replicas_param", None)
    if not name or missing(ratio):
        return None
    base_r, value_r = record_params(record_base).get(name), record_params(record_value).get(name)
    if not base_r or not value_r or base_r == value_r:
        return None
    if base_r > value_r:  # a baseline of more replicas (named with --baseline): the larger count's efficiency still
        return (1.0 / ratio) * value_r / base_r if ratio else None
    return ratio * base_r / value_r


# --------------------------------------------------------------------------- warnings of a side
def alike(texts: list[str], total: int) -> list[str]:
    """Texts that differ only in their figures told once, with how many of `total` processes gave one."""
    groups: dict[str, list[str]] = {}
    for text in texts:
        groups.setdefault(re.sub(r"[0-9][0-9.,]*", "#", text), []).append(text)
    out = []
    for found in groups.values():
        out.append(found[0] if total <= 1 else f"{found[0]} ({len(found)} of {total} processes)")
    return out


def _side_warnings(label: str, records: list[Result], by: list[str]) -> list[str]:
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
        env = record.env
        reasons = busy_reasons(env if isinstance(env, dict) else {}, record.device)
        if reasons:
            out.append((record, reasons))
    return out


def _busy_warning(label: str, records: list[Result]) -> str | None:
    busy = busy_records(records)
    if not busy:
        return None
    reasons = alike([reason for _, found in busy for reason in found], 1)
    return f"{label}: busy machine in {len(busy)} of {len(records)} process(es) ({'; '.join(reasons)})"


# --------------------------------------------------------------------------- the compared values
def _check_by(by: list[str], records: list[Result]) -> None:
    if not by:
        raise InputError("--by: name at least one field to compare", field="--by")
    known = known_fields(records)
    for name in by:
        if name not in known:
            raise InputError(f"--by {name}: no such field; expected one of {', '.join(known)}", field="--by")


def label(values: tuple) -> str:
    """A compared value (one per --by field) as the comparison names it: `torch / fp32`."""
    return " / ".join("-" if v is None else str(v) for v in values)


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
    return tuple(canonical_backend(p) if f == "backend" else p for f, p in zip(by, parts))


def resolve_baseline(baseline: str, by: list[str], order: list[tuple]) -> tuple:
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
            names = ", ".join(repr(label(v)) for v in matching)
            raise InputError(f"--baseline {baseline}: several variants match ({names}); name one", field="--baseline")
    if not matching:
        seen = ", ".join(repr(label(v)) for v in order)
        raise InputError(f"--baseline {baseline}: no result has it for {', '.join(by)} (seen: {seen})", field="--baseline")
    return matching[0]


def session_baseline(records: list[Result], sessions, baseline: str | None) -> str | None:
    """The baseline of a comparison by session: the one named, else the first of `sessions`; a unique
    prefix of a session id of the records names that session."""
    ids = list(dict.fromkeys(r.session_id for r in records))
    wanted = baseline if baseline is not None else (sessions[0] if sessions else None)
    if wanted is None:
        return baseline
    matches = [s for s in ids if str(s).startswith(wanted)]
    return matches[0] if wanted not in ids and len(matches) == 1 else wanted


# --------------------------------------------------------------------------- one row per compared value
@dataclass(frozen=True)
class Side:
    """One compared value's records of a match group: those with a value, one value per process, every block."""

    records: list
    processes: list
    blocks: list

    @classmethod
    def of(cls, records: list[Result], metric: str) -> "Side":
        """The side of these records for a metric. The first step's time is compile time only in a process that
        started with cold compilation caches: warm processes (`measure.compile_cache: warm`) take no part in it."""
        kept = [r for r in records if process_value(r, metric) is not None
                and not (metric == "first_step_s" and r.compile_cache == "warm")]
        return cls(kept, [process_value(r, metric) for r in kept], [x for r in kept for x in sample_values(r, metric)])


@dataclass(frozen=True)
class Question:
    """What one comparison asks: the compared fields, the metric and the verdict's thresholds."""

    by: list
    metric: str
    alpha: float
    min_effect: float
    #: a comparison by device: rows carry the datasheet's ratio beside the measured one
    by_device: bool
    #: a comparison by the replicas parameter alone: rows say how well the throughput scaled
    by_scaling: bool


def _ratio_ci(base: Side, value: Side, ratio) -> tuple:
    """(low, high, ci_basis) of the ratio: a bootstrap over processes, over the blocks of one process a side,
    or none."""
    low = high = basis = None
    if len(base.processes) >= 2 and len(value.processes) >= 2:
        _, low, high = stats.ratio_ci(value.processes, base.processes)
        basis = CI_PROCESSES
    elif (len(base.processes) == 1 and len(value.processes) == 1
          and len(base.blocks) >= 2 and len(value.blocks) >= 2):
        _, low, high = stats.ratio_ci(value.blocks, base.blocks)
        basis = CI_WITHIN
    if ratio is None:
        return None, None, None
    return low, high, basis


def host_of(record: Result) -> str | None:
    """The machine a record was measured on: its Slurm node where a job ran it, else the host the worker saw."""
    slurm = record.extra.get("slurm") if isinstance(record.extra, dict) else None
    node = slurm.get("node") if isinstance(slurm, dict) else None
    env = record.env if isinstance(record.env, dict) else {}
    return node or env.get("hostname")


def _hosts_warning(base_label: str, base: Side, value_label: str, value: Side, by: list[str]) -> list[str]:
    """A comparison whose sides were measured on different machines says so (unless the machines are compared)."""
    if {"device", "device_name"} & set(by):
        return []
    hosts_base = {h for h in map(host_of, base.records) if h}
    hosts_value = {h for h in map(host_of, value.records) if h}
    if not hosts_base or not hosts_value or hosts_base == hosts_value:
        return []
    return [f"{base_label} and {value_label} ran on different machines ({', '.join(sorted(hosts_base))} against "
            f"{', '.join(sorted(hosts_value))}): the difference may be the machines'"]


def _row_warnings(base_label: str, base: Side, value_label: str, value: Side, by: list[str]) -> dict:
    warnings = (_hosts_warning(base_label, base, value_label, value, by)
                + _side_warnings(base_label, base.records, by) + _side_warnings(value_label, value.records, by))
    busy = [w for w in (_busy_warning(base_label, base.records), _busy_warning(value_label, value.records)) if w]
    return dict(busy=bool(busy), warnings="; ".join(dict.fromkeys(busy + warnings)))


def _row(key: tuple, base_value: tuple, base: Side, value: tuple, side: Side, question: Question) -> dict:
    """The comparison row of one compared value against its group's baseline."""
    n_base, n_value = len(base.processes), len(side.processes)
    base_median, value_median = stats.median(base.processes), stats.median(side.processes)
    first, metric = base.records[0], question.metric
    judged = judge(base.processes, side.processes, verdict_words(metric, first.unit), alpha=question.alpha,
                   min_effect=question.min_effect)
    ratio, p_value = judged.ratio, judged.p_value
    low, high, basis = _ratio_ci(base, side, ratio)
    row = {name.removeprefix("params."): v for name, v in key}
    row.update(
        compared=",".join(question.by), baseline=label(base_value), value=label(value),
        metric=first.metric if metric == "median" else metric, unit=first.unit if metric == "median" else metric,
        baseline_median=base_median, value_median=value_median, ratio=ratio, ratio_ci_low=low, ratio_ci_high=high,
        ci_basis=basis, change_pct=None if ratio is None else 100.0 * (ratio - 1.0), p_value=p_value,
        verdict=judged.verdict,
        baseline_runs=n_base, value_runs=n_value, baseline_samples=len(base.blocks), value_samples=len(side.blocks),
        baseline_cv=stats.cv(base.processes), value_cv=stats.cv(side.processes),
        higher_is_better=higher_is_better(metric, first.unit),
        **_row_warnings(label(base_value), base, label(value), side, question.by),
    )
    if question.by_scaling:
        row["scaling_efficiency"] = scaling_efficiency_of(first, side.records[0], ratio)
    if question.by_device:
        row.update(datasheet_columns(base.records, side.records))
    return row


def _group_rows(key: tuple, sides: dict, base_value: tuple, order: list[tuple], question: Question) -> list[dict]:
    """The rows of one match group: each other compared value against the baseline's."""
    base = Side.of(sides[base_value], question.metric)
    if not base.processes:
        return []
    rows = []
    for value in sorted((v for v in sides if v != base_value), key=order.index):
        side = Side.of(sides[value], question.metric)
        if side.processes:
            rows.append(_row(key, base_value, base, value, side, question))
    return rows


# --------------------------------------------------------------------------- the comparison
def _comparable(records, by, metric: str, min_effect) -> tuple[list[Result], list[str]]:
    """The ok records that have every compared parameter, and the compared fields; InputError on bad input."""
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
    return [r for r in records if all(f in record_params(r) for f in params_by)], by


def grouped(records: list[Result], by: list[str]) -> tuple[list[tuple], dict]:
    """(compared values in their order, {match key: {compared value: [records]}}). The order sets the default
    baseline: the order first seen (records come oldest first), except by backend (`backend_order`)."""
    order: list[tuple] = []
    groups: dict[tuple, dict[tuple, list[Result]]] = {}
    for record in records:
        value = tuple(hashable(field_value(record, f)) for f in by)
        if value not in order:
            order.append(value)
        groups.setdefault(match_key(record, by), {}).setdefault(value, []).append(record)
    return backend_order(order, by), groups


def backend_order(order: list[tuple], by: list[str]) -> list[tuple]:
    """Compared values by backend in a fixed order: the built-in backends first, as harness lists them (torch,
    then tensorflow), then the others by name, each backend's variants by name (`tensorflow[keras=keras3]`
    before `tensorflow[keras=tf_keras]`); values alike there keep the order first seen. A session interleaves
    its runs in a shuffled order, so the first backend seen, and with it the default baseline of
    `compare --by backend`, would change from one session to the next."""
    if "backend" not in by:
        return order
    at, builtin = by.index("backend"), list(BUILTIN_BACKENDS)

    def rank(value: tuple) -> tuple:
        name = str(value[at])
        base = name.split("[", 1)[0]
        return (builtin.index(base) if base in builtin else len(builtin), base, name)

    return sorted(order, key=rank)


def _baseline_of(sides: dict, order: list[tuple], wanted: tuple | None, by_scaling: bool) -> tuple | None:
    """A match group's baseline value: the one named, else the fewest replicas (by scaling), else the first seen;
    None for a group with nothing to compare."""
    if len(sides) < 2:
        return None
    if wanted is not None:
        return wanted if wanted in sides else None
    if by_scaling:  # the fewest replicas is the baseline, whichever ran first
        return min(sides, key=lambda v: (_replicas_order(v), order.index(v)))
    return min(sides, key=order.index)


def compare(records, by: list[str], baseline: str | None = None, metric: str = "median", *,
            min_effect: float = MIN_EFFECT_PCT, alpha: float = ALPHA):
    """A pandas DataFrame, one row per (match group, compared value) against the baseline value.

    Only status-ok records take part (Results, record rows or a DataFrame), and each is one process: one
    sample, its median (or its value of `metric`). `ratio` is value / baseline of the medians of those
    samples; its CI a bootstrap over processes (`ci_basis` "processes"), or, with one process on each
    side, over the blocks of those two processes ("within-process": it leaves the between-process
    spread out, and no verdict rests on it). `verdict`: faster/slower only when each side has enough
    processes for a Mann-Whitney p below `alpha` to exist, p < alpha, the CI excludes 1 and |change| >=
    `min_effect` percent; else "no difference found" or "inconclusive: ..." saying why. `busy` marks
    rows whose records say their machine was busy. InputError on an unknown field, metric or baseline,
    or when nothing can be matched.
    """
    # deferred on purpose: `harness run` imports this package for its tables, and pandas is slow to import
    import pandas as pd

    records, by = _comparable(records, by, metric, min_effect)
    order, groups = grouped(records, by)
    wanted = resolve_baseline(baseline, by, order) if baseline is not None else None
    # by the replicas parameter alone, a throughput's rows say how well it scaled (global rate / R x rate at 1)
    by_scaling = metric == "median" and len(by) == 1 and any(
        getattr(WORKLOADS.get(r.workload), "replicas_param", None) == by[0] for r in records[:1])
    question = Question(by, metric, alpha, min_effect, any(f in ("device", "device_name") for f in by), by_scaling)
    rows = []
    for key, sides in groups.items():
        base_value = _baseline_of(sides, order, wanted, by_scaling)
        if base_value is not None:
            rows += _group_rows(key, sides, base_value, order, question)
    if not rows:
        values = ", ".join(repr(label(v)) for v in order)
        raise InputError(
            f"--by {','.join(by)}: no two ok results differ only in {', '.join(by)} (values seen: {values})",
            field="--by",
        )
    frame = pd.DataFrame(rows)
    tail = (list(RESULT_COLUMNS) + (list(DATASHEET_COLUMNS) if question.by_device else [])
            + (list(SCALING_COLUMNS) if by_scaling else []))
    head = [c for c in frame.columns if c not in tail]
    return frame[head + tail]
