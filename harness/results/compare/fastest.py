"""Each backend variant's fastest configuration of a workload, and the line that names it."""

from __future__ import annotations

from harness.results.compare.display import fmt
from harness.results.compare.records import (
    backend_variant,
    hashable,
    ok_records,
    process_value,
)
from harness.results.compare.verdicts import (
    FASTER,
    METRICS,
    SLOWER,
    higher_is_better,
    plural,
)
from harness.results.record import Result
from harness.timing import stats


def _fastest(workload: str | None, variant: str | None, mine: list[Result], metric: str) -> dict:
    """The fastest configuration among one variant's records of one workload (each with a value)."""
    configs: dict[tuple, list[Result]] = {}
    for r in mine:
        configs.setdefault((r.device, hashable(r.params or {})), []).append(r)
    unit = mine[0].unit if metric == "median" else metric
    higher = higher_is_better(metric, mine[0].unit)
    scored = [(stats.median([process_value(r, metric) for r in rs]), rs) for rs in configs.values()]
    best, best_records = (max if higher else min)(scored, key=lambda item: item[0])
    params = best_records[0].params or {}
    varying = [k for k in params if len({hashable(r.param(k)) for r in mine}) > 1]
    config = {}
    if len({r.device for r in mine}) > 1:
        config["device"] = best_records[0].device
    config.update({k: params[k] for k in varying})
    return dict(workload=workload, backend=variant, config=config, median=best, unit=unit,
                processes=len(best_records), configurations=len(configs))


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
    for workload in dict.fromkeys(r.workload for r in records):
        subset = [r for r in records if r.workload == workload]
        for variant in dict.fromkeys(backend_variant(r) for r in subset):
            mine = [r for r in subset if backend_variant(r) == variant and process_value(r, metric) is not None]
            if mine:
                out.append(_fastest(workload, variant, mine, metric))
    return out


def describe_fastest(rows: list[dict]) -> list[str]:
    """One line per backend variant and workload naming its fastest configuration, with its median and unit
    (`torch on gemm: 41.2 TFLOP/s (...; one configuration ran)` where there is nothing to choose from)."""
    lines = []
    for row in rows:
        figure = f"{fmt(row['median'])} {row['unit'] or ''}".rstrip()
        if row["configurations"] > 1:
            what = ", ".join(f"{k}={v}" for k, v in row["config"].items()) or "(configurations alike)"
            lines.append(f"fastest {row['backend']} on {row['workload']}: {what}: {figure} (median of "
                         f"{plural(row['processes'])}; fastest of {row['configurations']} configurations)")
        else:
            lines.append(f"{row['backend']} on {row['workload']}: {figure} (median of {plural(row['processes'])}; "
                         "one configuration ran)")
    return lines
