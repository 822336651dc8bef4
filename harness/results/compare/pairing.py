"""Pairing records for a comparison: match groups and one row per compared value against its group's baseline
(harness.results.compare.baseline), with what the row warns of (harness.results.compare.caveats).

Records are matched on every identifying field except the ones compared (a backend's non-default
options included), so only the compared field differs. Each record is one worker process, and a
process is the unit of the comparison: it gives one sample, its median over its timed blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.errors import InputError, did_you_mean
from harness.results.compare.baseline import (
    backend_order,
    baseline_of,
    label,
    resolve_baseline,
)
from harness.results.compare.caveats import row_warnings
from harness.results.compare.datasheet import datasheet_columns
from harness.results.compare.records import (
    BY_FIELDS,
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
from harness.results.compare.row import ComparisonRow, frame_of
from harness.results.compare.verdicts import (
    ALPHA,
    METRICS,
    MIN_EFFECT_PCT,
    higher_is_better,
    judge,
    verdict_words,
)
from harness.results.record import Result
from harness.timing import stats
from harness.workloads import WORKLOADS

#: ci_basis values: the ratio's CI came from a bootstrap over processes, or from one process's blocks.
CI_PROCESSES, CI_WITHIN = "processes", "within-process"


def scaling_efficiency_of(record_base: Result, record_value: Result, ratio) -> float | None:
    """rate(R) / (R x rate(1)) generalised to any two replica counts: the per-replica rate of the larger count
    over that of the smaller, whichever side is the baseline, for a throughput (higher is better) compared
    by the workload's replicas parameter; else None."""

    workload = WORKLOADS.get(record_base.workload)
    if workload is None or workload.replicas_param is None or missing(ratio):
        return None
    base_r, value_r = workload.replicas(record_params(record_base)), workload.replicas(record_params(record_value))
    if base_r == value_r:
        return None
    if base_r > value_r:  # a baseline of more replicas (named with --baseline): the larger count's efficiency still
        return (1.0 / ratio) * value_r / base_r if ratio else None
    return ratio * base_r / value_r


def _check_by(by: list[str], records: list[Result]) -> None:
    if not by:
        raise InputError("--by: name at least one field to compare", field="--by")
    known = known_fields(records)
    for name in by:
        if name not in known:
            raise InputError(f"--by {name}: no such field; expected one of {', '.join(known)}{did_you_mean(name, known)}",
                             field="--by")


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


def _row(key: tuple, base_value: tuple, base: Side, value: tuple, side: Side, question: Question) -> ComparisonRow:
    """The comparison row of one compared value against its group's baseline."""
    first, metric = base.records[0], question.metric
    judged = judge(base.processes, side.processes, verdict_words(metric, first.unit), alpha=question.alpha,
                   min_effect=question.min_effect)
    ratio = judged.ratio
    low, high, basis = _ratio_ci(base, side, ratio)
    busy, warnings = row_warnings(label(base_value), base.records, label(value), side.records, question.by)
    sheet = datasheet_columns(base.records, side.records) if question.by_device else (None, None)
    return ComparisonRow(
        where={name.removeprefix("params."): v for name, v in key},
        compared=",".join(question.by), baseline=label(base_value), value=label(value),
        metric=first.metric if metric == "median" else metric, unit=first.unit if metric == "median" else metric,
        baseline_median=stats.median(base.processes), value_median=stats.median(side.processes), ratio=ratio,
        ratio_ci_low=low, ratio_ci_high=high, ci_basis=basis,
        change_pct=None if ratio is None else 100.0 * (ratio - 1.0), p_value=judged.p_value, verdict=judged.verdict,
        baseline_runs=len(base.processes), value_runs=len(side.processes), baseline_samples=len(base.blocks),
        value_samples=len(side.blocks), baseline_cv=stats.cv(base.processes), value_cv=stats.cv(side.processes),
        higher_is_better=higher_is_better(metric, first.unit), busy=busy, warnings=warnings,
        by_device=question.by_device, datasheet_ratio=sheet[0], datasheet=sheet[1], by_scaling=question.by_scaling,
        scaling_efficiency=scaling_efficiency_of(first, side.records[0], ratio) if question.by_scaling else None)


def _group_rows(key: tuple, sides: dict, base_value: tuple, order: list[tuple],
                question: Question) -> list[ComparisonRow]:
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
        raise InputError(f"--metric {metric}: expected one of {', '.join(METRICS)}{did_you_mean(metric, METRICS)}",
                         field="--metric")
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


def compare(records, by: list[str], baseline: str | None = None, metric: str = "median", *,
            min_effect: float = MIN_EFFECT_PCT, alpha: float = ALPHA):
    """comparison_rows as a pandas DataFrame (`harness compare`'s CSV and JSON, users' notebooks): the match fields,
    then RESULT_COLUMNS (and DATASHEET_COLUMNS by device, SCALING_COLUMNS by replicas)."""
    return frame_of(comparison_rows(records, by, baseline, metric, min_effect=min_effect, alpha=alpha))


def comparison_rows(records, by: list[str], baseline: str | None = None, metric: str = "median", *,
                    min_effect: float = MIN_EFFECT_PCT, alpha: float = ALPHA) -> list[ComparisonRow]:
    """One row per (match group, compared value) against the baseline value.

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
    records, by = _comparable(records, by, metric, min_effect)
    order, groups = grouped(records, by)
    wanted = resolve_baseline(baseline, by, order) if baseline is not None else None
    # by the replicas parameter alone, a throughput's rows say how well it scaled (global rate / R x rate at 1)
    by_scaling = metric == "median" and len(by) == 1 and any(
        getattr(WORKLOADS.get(r.workload), "replicas_param", None) == by[0] for r in records[:1])
    question = Question(by, metric, alpha, min_effect, any(f in ("device", "device_name") for f in by), by_scaling)
    rows = []
    for key, sides in groups.items():
        base_value = baseline_of(sides, order, wanted, by_scaling)
        if base_value is not None:
            rows += _group_rows(key, sides, base_value, order, question)
    if not rows:
        values = ", ".join(repr(label(v)) for v in order)
        raise InputError(
            f"--by {','.join(by)}: no two ok results differ only in {', '.join(by)} (values seen: {values})",
            field="--by",
        )
    return rows
