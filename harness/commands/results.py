"""`harness results`: what the store holds, as a table or exported; `--import` takes results back in."""

from __future__ import annotations

import json

import click

from harness.errors import InputError
from harness.present.table import fit, summary_table
from harness.results.record import Result
from harness.results.store import (
    Store,
    default_store_path,
    read_importable,
    records_frame,
)

FORMATS = ("table", "csv", "json", "parquet")


def _integer_fields() -> list[str]:
    """Record fields typed `int | None` (byte counts...): exported as integers even where some are null."""
    import dataclasses


    return [f.name for f in dataclasses.fields(Result) if str(f.type).replace(" ", "") in ("int|None", "int")]


def flatten_for_csv(frame):
    """Dict and list columns as JSON text, so a CSV cell holds them losslessly; integer fields as
    integers (pandas makes a column with a missing value float: 608702464.0)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, (dict, list))).any():
            out[column] = out[column].map(lambda v: json.dumps(v, default=str) if isinstance(v, (dict, list)) else v)
    for column in _integer_fields():
        if column in out.columns:
            values = out[column]
            whole = values.dropna().map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and float(v).is_integer())
            if whole.all():
                out[column] = values.astype("Int64")
    return out


@click.command("results")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--session", default=None, help="Only this session's results (its id, or a unique prefix of it).")
@click.option("--output", "-o", default=None, help="Write to this file instead of standard output (needed for parquet).")
@click.option("--import", "imports", multiple=True, metavar="FILE",
              help="Take the results of FILE into the store: a side file kept when the store could not be written, "
                   "a JSON array of records (--format json), or another store, damaged or not (repeatable).")
@click.option("--sessions", "list_sessions", is_flag=True,
              help="List the stored sessions: id, when it started, its status, its runs and its command.")
@click.option("--wide", is_flag=True,
              help="Every column and every note in full, however wide (the table fits the terminal otherwise).")
def command(store_path, fmt, session, output, imports, list_sessions, wide) -> None:
    """Print or export the stored results (json: an array of result records), list the sessions
    (--sessions), or --import some.

    The table fits the terminal ($COLUMNS, else its width): what every row shares is said once on a
    line above it, long notes are shortened and the least needed columns left out, saying so;
    --wide prints everything.
    """
    from pathlib import Path


    path = str(store_path or default_store_path())
    if imports:
        for source in imports:  # every file is read and checked before anything is written
            read_importable(source)
        with Store(path) as store:
            for source in imports:
                counts = store.import_file(source)
                skipped = f", {counts['unreadable']} unreadable row(s) skipped" if counts["unreadable"] else ""
                click.echo(f"took {counts['new']} new result(s) of {counts['records']} and {counts['new_sessions']} new "
                           f"session(s) of {counts['sessions']} from {source} into {store.path}{skipped}", err=True)
        return

    if not Path(path).exists():
        raise InputError(f"store {path}: no such file", source=path, field="--store")
    with Store(path, readonly=True) as store:
        if list_sessions:
            rows = session_rows(store)
        session_ids = None
        if session and not list_sessions:
            matches = store.find_sessions(session)
            if len(matches) > 1:
                raise InputError(f"--session {session}: {len(matches)} sessions match ({', '.join(matches[:10])}); give "
                                 "more of the id", source=path, field="--session")
            if not matches:  # a session known only by its results (imported records) is matched on them
                matches = sorted({r["session_id"] for r in store.records() if str(r.get("session_id")).startswith(session)})
            if len(matches) != 1:
                known = ", ".join(f"{s['session_id']} ({s.get('started_at') or '?'}, {s.get('state') or '?'})"
                                  for s in store.sessions()) or "none"
                raise InputError(f"store {path}: no single session matches {session!r} (sessions: {known}); "
                                 f"harness results --sessions lists them", source=path, field="--session")
            session_ids = matches
        records = store.records(session_ids) if not list_sessions else []
        for side in store.side_files():
            click.echo(f"note: {side} holds results this store could not take when they were measured; take them in "
                       f"with: harness results --import {side} --store {path}", err=True)
    if list_sessions:
        text = sessions_text(rows, fmt, wide)
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            click.echo(f"wrote {len(rows)} session(s) to {output}", err=True)
        else:
            click.echo(text)
        return
    if fmt == "table":
        text = summary_table(records, wide=wide)
    elif fmt == "json":  # the records as stored: integers stay integers, null stays null
        text = json.dumps(records, indent=1, default=str)
    elif fmt == "csv":
        text = flatten_for_csv(records_frame(records)).to_csv(index=False)
    else:
        if not output:
            raise InputError("--format parquet needs --output FILE", field="--output")
        try:
            flatten_for_csv(records_frame(records)).to_parquet(output, index=False)
        except ImportError as exc:
            raise InputError(f"--format parquet needs pyarrow (pip install 'harness[parquet]'): {exc}", field="--format") from None
        click.echo(f"wrote {len(records)} record(s) to {output}", err=True)
        return
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
        click.echo(f"wrote {len(records)} record(s) to {output}", err=True)
    else:
        click.echo(text)



def session_rows(store) -> list[dict]:
    """One row per stored session, oldest first: id, start, status, runs planned, results stored
    (and how many ok), the command that started it."""
    rows = []
    for s in store.sessions():
        full = store.session(s["session_id"]) or {}
        started = str(s.get("started_at") or "-")[:19].replace("T", " ")
        rows.append({"session": s["session_id"], "started (UTC)": started, "status": s.get("state"),
                     "runs": len(full.get("plan") or []), "results": s.get("results") or 0, "ok": int(s.get("ok") or 0),
                     "scenario": s.get("scenario_path"), "command": full.get("command")})
    return rows


def sessions_text(rows: list[dict], fmt: str, wide: bool) -> str:
    """The sessions as a table that fits the terminal (its command shortened), or as JSON/CSV."""
    if fmt == "json":
        return json.dumps(rows, indent=1, default=str)
    if fmt == "csv":
        import csv
        import io

        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["session", "started (UTC)", "status", "runs", "results", "ok", "scenario",
                                                 "command"])
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue().rstrip("\n")
    if fmt == "parquet":
        raise InputError("--sessions: --format table, csv or json", field="--format")
    if not rows:
        return "(no sessions)"

    fitted = fit(rows, wide=wide, move=False, required=("session", "started (UTC)", "status", "runs", "results", "ok"),
                 shorten=("command", "scenario"), optional=("scenario",))
    return "\n".join(p for p in (fitted.text, fitted.footer()) if p)
