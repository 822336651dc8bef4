"""`harness compare`: stored results side by side, with ratios, confidence intervals and significance."""

from __future__ import annotations

import json
import math

import click

from harness.errors import InputError
from harness.present.report import markdown_table
from harness.present.table import cell, describe, fit
from harness.results.compare import (
    CI_WITHIN,
    DATASHEET_COLUMNS,
    MIN_EFFECT_PCT,
    RESULT_COLUMNS,
    compare,
    describe_common,
    describe_fastest,
    display_rows,
    fail_if_slower,
    fastest_configurations,
    load_records,
    parse_by,
    slowdown_pct,
    table_notes,
)

FORMATS = ("table", "csv", "json", "markdown")


def _plain(value):
    # JSON has no NaN: a figure that is missing is null
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


@click.command("compare")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--by", "by", multiple=True, metavar="FIELD",
              help="Field to compare: backend, device, device_name, framework_version, session_id or a neutral "
                   "parameter (precision, batch_size, execution, ...). Repeatable, or comma-separated.")
@click.option("--baseline", default=None, metavar="VALUE",
              help="The value of the --by field(s) the others are compared with (default: the first seen).")
@click.option("--session", "sessions", multiple=True, metavar="ID",
              help="Only these sessions; two or more without --by compare the sessions, the first as baseline.")
@click.option("--metric", default="median", show_default=True,
              help="median (the headline, on raw samples), or a record field: step_time_s, peak_allocated_bytes, ...")
@click.option("--fail-if-slower", "fail_pct", type=float, default=None, metavar="PCT",
              help="Exit 1 when a matched row is significantly slower than its baseline by more than PCT percent.")
@click.option("--min-effect", "min_effect", type=float, default=None, metavar="PCT",
              help="The smallest change called faster or slower, in percent (default 2).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--wide", is_flag=True,
              help="Every column and every warning in full, however wide (the table fits the terminal otherwise).")
def command(store_path, by, baseline, sessions, metric, fail_pct, min_effect, fmt, wide) -> None:
    """Compare stored results: ratio to a baseline, its 95% CI, Mann-Whitney p-value and a verdict.

    Each stored run is one worker process and gives one sample (its median); a verdict needs at
    least 4 processes a side (`measure.processes`, 5 by default), p < 0.05, a CI excluding 1 and a
    change of at least --min-effect. After a --by backend table, one line per backend names its
    fastest configuration. The table fits the terminal ($COLUMNS, else its width): what every row
    shares is said on the line above it and long warnings are shortened; --wide prints everything.
    """

    by = parse_by(by)
    if fail_pct is not None and fail_pct < 0:
        raise InputError(f"--fail-if-slower {fail_pct:g}: expected a percentage >= 0", field="--fail-if-slower")
    if min_effect is None:
        min_effect = MIN_EFFECT_PCT
    if not min_effect >= 0:
        raise InputError(f"--min-effect {min_effect:g}: expected a percentage >= 0", field="--min-effect")
    if not by:
        if len(sessions) < 2:
            raise InputError("give --by FIELD, or two --session IDs to compare sessions", field="--by")
        by = ["session_id"]
    records = load_records(store_path, sessions)
    if by == ["session_id"]:
        # the first --session is the baseline; a session may be named by a unique prefix of its id
        ids = list(dict.fromkeys(r.session_id for r in records))
        wanted = baseline if baseline is not None else (sessions[0] if sessions else None)
        matches = [s for s in ids if wanted is not None and str(s).startswith(wanted)]
        if wanted is not None:
            baseline = matches[0] if wanted not in ids and len(matches) == 1 else wanted
    table = compare(records, by, baseline, metric, min_effect=min_effect)

    if fmt == "json":
        rows = [{k: _plain(v) for k, v in r.items()} for r in table.to_dict(orient="records")]
        click.echo(json.dumps(rows, indent=1, default=str))
    elif fmt == "csv":
        click.echo(table.to_csv(index=False), nl=False)
    else:
        common, rows = display_rows(table)
        if fmt == "markdown":
            click.echo(describe_common(common) + "\n")
            click.echo(markdown_table(rows))
        else:
            for line in table_lines(table, common, rows, wide=wide):
                click.echo(line)
        for note in table_notes(table):
            click.echo(note)
        if "backend" in by:
            for line in describe_fastest(fastest_configurations(records, metric)):
                click.echo(line)

    if fail_pct is not None:
        common, _ = display_rows(table)
        regressed = fail_if_slower(table, fail_pct)
        for row in regressed:
            click.echo(
                f"regression: {row['value']} is {slowdown_pct(row):.1f}% slower than {row['baseline']}"
                f" (ratio {row['ratio']:.4g} [{row['ratio_ci_low']:.4g}, {row['ratio_ci_high']:.4g}],"
                f" p={row['p_value']:.2g}){_where(row, common)}",
                err=True,
            )
        if regressed:
            click.echo(f"{len(regressed)} row(s) slower by more than {fail_pct:g}%", err=True)
            click.get_current_context().exit(1)
        click.echo(f"no row slower by more than {fail_pct:g}%", err=True)


#: Columns of the comparison that stay in the table even when every row has the same value.
COMPARE_KEEP = ("baseline", "value", "baseline median", "median", "ratio [95% CI]", "change", "p", "verdict", "warnings")
#: Left out first when the table is too wide for the terminal.
COMPARE_OPTIONAL = ("change",)
#: ... and, once the warnings and verdicts are as short as they get, these (the ratio says it).
COMPARE_LAST_RESORT = (("baseline median", "median"), "p")


def table_lines(table, common: dict, rows: list[dict], *, wide: bool = False, width: int | None = None) -> list[str]:
    """The comparison for the terminal: `compared: ...; every row: ...` (what the rows share,
    wrapped), the table fitted to the width, and a line saying what it shortened or left out.

    Integers stay integers (`size=1024`, also where pandas made the column float); a ratio without
    an interval (one process against several, or one timed block) says `[n/a]`.
    """

    raw = table.to_dict(orient="records") if hasattr(table, "to_dict") else list(table)
    shown = []
    for source, row in zip(raw, rows):
        row = dict(row)
        for key in row:  # the match fields as they were, not through compare's number format
            if key in source and key not in RESULT_COLUMNS and key not in DATASHEET_COLUMNS and key != "verdict":
                row[key] = cell(source[key])
        ratio = row.get("ratio [95% CI]")
        if ratio and ratio != "-" and "[" not in ratio:
            row["ratio [95% CI]"] = f"{ratio} [n/a]"
        shown.append(row)
    compared = common.get("compared")
    rest = {k: cell(v) for k, v in common.items() if k != "compared"}
    fitted = fit(shown, width=width, wide=wide, keep=COMPARE_KEEP, required=COMPARE_KEEP[:-1], shorten={"warnings": 16, "verdict": 32},
                 optional=COMPARE_OPTIONAL, last_resort=COMPARE_LAST_RESORT)
    shared = {**rest, **fitted.common}
    head = f"compared: {compared}"
    if shared:
        head = describe(shared, 10**9 if wide else fitted.width, lead=f"{head}; every row: ")
    lines = [head, fitted.text]
    if fitted.footer():
        lines.append(fitted.footer())
    return lines


def _where(row: dict, common: dict) -> str:
    """The match fields that tell this row from the others ('' when there is one kind of row)."""

    skip = set(RESULT_COLUMNS) | set(DATASHEET_COLUMNS) | set(common)
    where = ", ".join(f"{k}={v}" for k, v in row.items() if k not in skip and v is not None and v == v)
    return f" for {where}" if where else ""
