"""`harness compare`: stored results side by side, with ratios, confidence intervals and significance."""

from __future__ import annotations

import math
from collections import defaultdict

import click

from harness.commands.choice import Choice
from harness.errors import InputError
from harness.present.breakdown import breakdown_text
from harness.present.comparison import comparison_text, regression_lines
from harness.results.compare import (
    MIN_EFFECT_PCT,
    comparison_rows,
    fail_if_slower,
    field_value,
    load_records,
    parse_by,
    resolve_latest,
    session_baseline,
)
from harness.results.compare.breakdown import breakdown_pairs
from harness.timing import stats
from harness.timing.settings import Measure

FORMATS = ("table", "csv", "json", "markdown")
#: The processes a configuration runs by default (`auto`: from the fewest a verdict needs up to max_processes).
LEAST, MOST = Measure().process_bounds()
HELP = f"""Compare stored results: ratio to a baseline, its 95% CI, Mann-Whitney p-value and a verdict.

Each stored run is one worker process and gives one sample (its median); a verdict needs at
least {stats.processes_needed(stats.VERDICT_ALPHA)} processes a side (`measure.processes`: {Measure().processes} by
default, {LEAST} to {MOST} processes a configuration), p < {stats.VERDICT_ALPHA:g}, a CI excluding 1 and a
change of at least --min-effect. After a --by backend table, one line per backend names its
fastest configuration. The table fits the terminal ($COLUMNS, else its width): what every row
shares is said on the line above it and long warnings are shortened; --wide prints everything.
"""


@click.command("compare", help=HELP)
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--by", "by", multiple=True, metavar="FIELD",
              help="Field to compare: backend, device, device_name, framework_version, session_id or a neutral "
                   "parameter (precision, batch_size, execution, ...). Repeatable, or comma-separated.")
@click.option("--baseline", default=None, metavar="VALUE",
              help="The value of the --by field(s) the others are compared with (default: by backend torch, "
                   "then tensorflow, then the others by name; otherwise the first seen).")
@click.option("--session", "sessions", multiple=True, metavar="ID",
              help="Only these sessions (`latest`: the newest with results); two or more without --by compare the "
                   "sessions, the first as baseline. Without it every session in the store is pooled.")
@click.option("--metric", default="median", show_default=True,
              help="median (the headline, on raw samples), or a record field: step_time_s, peak_allocated_bytes, ...")
@click.option("--fail-if-slower", "fail_pct", type=float, default=None, metavar="PCT",
              help="Exit 1 when a matched row is significantly slower than its baseline by more than PCT percent.")
@click.option("--min-effect", "min_effect", type=float, default=None, metavar="PCT",
              help=f"The smallest change called faster or slower, in percent (default {MIN_EFFECT_PCT:g}).")
@click.option("--format", "fmt", type=Choice(FORMATS), default="table", show_default=True)
@click.option("--wide", is_flag=True,
              help="Every column and every warning in full, however wide (the table fits the terminal otherwise).")
@click.option("--breakdown", is_flag=True,
              help="Where each side's step goes instead of its speed: its profile classes (ms per step) beside its "
                   "baseline's, with the difference (records run with --profile; table or json).")
def command(store_path, by, baseline, sessions, metric, fail_pct, min_effect, fmt, wide, breakdown) -> None:
    """`harness compare`: its help is HELP, which states the defaults it names from their source."""

    by = parse_by(by)
    sessions = resolve_latest(store_path, sessions)
    min_effect = _checked(fail_pct, min_effect)
    if not by:
        if len(sessions) < 2:
            raise InputError("give --by FIELD, or two --session IDs to compare sessions", field="--by")
        by = ["session_id"]
    records = load_records(store_path, sessions)
    if by == ["session_id"]:
        baseline = session_baseline(records, sessions, baseline)
    if breakdown:
        if fmt not in ("table", "json"):
            raise InputError(f"--breakdown --format {fmt}: expected table or json", field="--format")
        click.echo(breakdown_text(breakdown_pairs(records, by, baseline), fmt), nl=False)
        return
    _metric_recorded(records, by, metric)
    table = comparison_rows(records, by, baseline, metric, min_effect=min_effect)
    click.echo(comparison_text(table, fmt, wide=wide, records=records, by=by, metric=metric,
                               pooled=by != ["session_id"]), nl=False)
    if fail_pct is not None:
        regressed = fail_if_slower(table, fail_pct)
        for line in regression_lines(table, regressed, fail_pct):
            click.echo(line, err=True)
        if regressed:
            click.get_current_context().exit(1)


def _checked(fail_pct: float | None, min_effect: float | None) -> float:
    """The minimum effect (default MIN_EFFECT_PCT); InputError for a percentage that is negative or not a finite
    number (`nan`, `inf`, `1e309`): a gate no row can fail is no gate."""
    if fail_pct is not None and not (math.isfinite(fail_pct) and fail_pct >= 0):
        raise InputError(f"--fail-if-slower {fail_pct:g}: expected a finite percentage >= 0", field="--fail-if-slower")
    if min_effect is None:
        min_effect = MIN_EFFECT_PCT
    if not (math.isfinite(min_effect) and min_effect >= 0):
        raise InputError(f"--min-effect {min_effect:g}: expected a finite percentage >= 0", field="--min-effect")
    return min_effect


#: Memory figures every backend records on every device, offered where one is missing.
MEMORY_EVERYWHERE = "host_peak_rss_bytes"


def _metric_recorded(records, by: list[str], metric: str) -> None:
    """InputError where some compared side recorded no value of `metric` (the framework allocator's peak
    is a GPU figure: no backend records it on the CPU), naming the sides and the metric to use instead."""
    if metric == "median":
        return
    sides: defaultdict[str, bool] = defaultdict(bool)
    for record in records:
        if record.status != "ok":
            continue
        side = " / ".join(str(field_value(record, f)) for f in by)
        value = getattr(record, metric, None)
        sides[side] = sides[side] or value is not None
    lacking = sorted(side for side, has in sides.items() if not has)
    if not lacking or (len(lacking) == len(sides) and not metric.endswith("_bytes")):
        return  # every side has it, or none has a figure this message could offer another metric for
    devices = sorted({str(r.device) for r in records if r.status == "ok"})
    hint = (f"; compare memory with --metric {MEMORY_EVERYWHERE} (the process's peak resident memory, recorded by "
            "every backend on every device)" if metric.endswith("_bytes") and metric != MEMORY_EVERYWHERE else "")
    raise InputError(f"--metric {metric}: no value recorded for {', '.join(lacking)} on {', '.join(devices)}{hint}",
                     field="--metric")

