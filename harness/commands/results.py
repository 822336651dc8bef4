"""`harness results`: what the store holds, as a table or exported; `--import` takes results back in."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from pathlib import Path

import click

from harness.commands.choice import Choice
from harness.errors import InputError
from harness.present.cells import run_time
from harness.present.fitting import fit
from harness.present.table import summary_table
from harness.results.compare.records import LATEST, latest_session, refuse_empty_session
from harness.results.store import (
    Store,
    default_store_path,
    open_store,
    parse_location,
    read_importable,
    store_exists,
)
from harness.results.store.exports import export_text, spreadsheet_text, write_parquet

FORMATS = ("table", "csv", "json", "parquet")
SESSION_COLUMNS = ("session", "started (UTC)", "status", "runs", "results", "ok", "run time", "scenario", "command")


@click.command("results")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--format", "fmt", type=Choice(FORMATS), default="table", show_default=True)
@click.option("--session", default=None,
              help="Only this session's results (its id, a unique prefix of it, or `latest`: the newest with results).")
@click.option("--output", "-o", default=None, help="Write to this file instead of standard output (needed for parquet).")
@click.option("--import", "imports", multiple=True, metavar="FILE",
              help="Take the results of FILE into the store: a side file kept when the store could not be written, "
                   "a JSON array of records (--format json), or another store, damaged or not (repeatable).")
@click.option("--sessions", "list_sessions", is_flag=True,
              help="List the stored sessions: id, when it started, its status, its runs, its run time (the runs' "
                   "own time added up, waits for the host's timing lock left out) and its command; under the "
                   "table, every session's run time added up.")
@click.option("--wide", is_flag=True,
              help="Every column and every note in full, however wide (the table fits the terminal otherwise).")
def command(store_path, fmt, session, output, imports, list_sessions, wide) -> None:
    """Print or export the stored results (json: an array of result records), list the sessions
    (--sessions), or --import some.

    The table fits the terminal ($COLUMNS, else its width): what every row shares is said once on a
    line above it, long notes are shortened and the least needed columns left out, saying so;
    --wide prints everything.
    """
    path = default_store_path(store_path)
    check_output(output)
    refuse_empty_session([session])
    if imports:
        take_in(path, imports)
    elif list_sessions:
        print_sessions(path, fmt, output, wide)
    else:
        print_results(path, fmt, session, output, wide)


def take_in(path: str, sources) -> None:
    """Import every source into the store at path, saying what each added; every file is read and
    checked before anything is written."""
    for source in sources:
        read_importable(source)
    with open_store(path) as store:
        for source in sources:
            counts = store.import_file(source)
            skipped = f", {counts['unreadable']} unreadable row(s) skipped" if counts["unreadable"] else ""
            click.echo(f"took {counts['new']} new result(s) of {counts['records']} and {counts['new_sessions']} new "
                       f"session(s) of {counts['sessions']} from {source} into {store.path}{skipped}", err=True)


def _reader(path: str) -> Store:
    """The store at path, opened for reading (InputError where there is no such file)."""
    location = parse_location(path)
    if not store_exists(location):
        raise InputError(f"store {location.display}: no such file", source=location.display, field="--store")
    return open_store(location, readonly=True)


def check_output(output: str | None) -> None:
    """InputError (exit 2, nothing read or written) for an --output that cannot be a file: empty, a folder, or in
    a folder that does not exist."""
    if output is None:
        return
    target = Path(output)
    if not str(output).strip():
        raise InputError(f"--output {output!r}: expected a file path, got an empty one", field="--output")
    if target.is_dir():
        raise InputError(f"--output {output}: is a folder; expected a file to write", field="--output")
    if not target.resolve().parent.is_dir():
        raise InputError(f"--output {output}: folder {target.resolve().parent} does not exist; create it first",
                         field="--output")


def _written(output: str, write) -> None:
    """write(output), an OSError (no permission, a full disk) said as an InputError naming the file."""
    try:
        write(output)
    except OSError as exc:
        raise InputError(f"--output {output}: cannot be written: {exc.strerror or exc}", field="--output") from None


def _write_text(text: str):
    def write(output: str) -> None:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    return write


def _note_side_files(store: Store) -> None:
    for side in store.side_files():
        click.echo(f"note: {side} holds results this store could not take when they were measured; take them in "
                   f"with: harness results --import {side} --store {store.path}", err=True)


def _emit(text: str, output: str | None, wrote: str) -> None:
    """Text to the output file (saying so on standard error) or to standard output."""
    if output:
        _written(output, _write_text(text))
        click.echo(f"wrote {wrote} to {output}", err=True)
    else:
        click.echo(text)


def print_results(path: str, fmt: str, session: str | None, output: str | None, wide: bool) -> None:
    """The stored results (of one session) as a table that fits the terminal, JSON, CSV or parquet."""
    with _reader(path) as store:
        session_ids = [latest_session(store, path) if session == LATEST else store.resolve_session(session)] \
            if session else None
        records = store.results(session_ids) if fmt == "table" else store.records(session_ids)
        _note_side_files(store)
    if fmt == "parquet":
        if not output:
            raise InputError("--format parquet needs --output FILE", field="--output")
        _written(output, lambda target: write_parquet(records, target))
        click.echo(f"wrote {len(records)} record(s) to {output}", err=True)
        return
    text = summary_table(records, wide=wide) if fmt == "table" else export_text(records, fmt)
    _emit(text, output, f"{len(records)} record(s)")


def print_sessions(path: str, fmt: str, output: str | None, wide: bool) -> None:
    """The stored sessions as a table that fits the terminal, JSON or CSV."""
    with _reader(path) as store:
        rows = session_rows(store)
        _note_side_files(store)
    text = sessions_text(rows, fmt, wide)
    _emit(text + "\n" if output else text, output, f"{len(rows)} session(s)")


def session_rows(store) -> list[dict]:
    """One row per stored session, oldest first: id, start, status, runs planned, results stored
    (and how many ok), its run time (its records' run time added up: what the runs took, without the gaps
    of a session stopped and resumed nor the waits for the host's timing lock; `run_s` the same in
    seconds), the command that started it."""
    seconds: defaultdict[str, float] = defaultdict(float)
    for r in store.results():
        seconds[r.session_id] += r.run_s
    rows = []
    for s in store.sessions():
        full = store.session(s.session_id)
        started = str(s.started_at or "-")[:19].replace("T", " ")
        rows.append({"session": s.session_id, "started (UTC)": started, "status": s.state,
                     "runs": len(full.plan) if full is not None else 0, "results": s.results, "ok": s.ok,
                     "run time": run_time(seconds[s.session_id]) if s.results else "-",
                     "run_s": round(seconds[s.session_id], 3),
                     "scenario": s.scenario_path, "command": full.command if full is not None else None})
    return rows


def sessions_text(rows: list[dict], fmt: str, wide: bool) -> str:
    """The sessions as a table that fits the terminal (its command shortened), or as JSON/CSV."""
    if fmt == "json":
        return json.dumps(rows, indent=1, default=str)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=[*SESSION_COLUMNS, "run_s"])
        writer.writeheader()
        writer.writerows({k: spreadsheet_text(v) for k, v in row.items()} for row in rows)
        return out.getvalue().rstrip("\n")
    if fmt == "parquet":
        raise InputError("--sessions: --format table, csv or json", field="--format")
    if not rows:
        return "(no sessions)"
    shown = [{k: v for k, v in row.items() if k != "run_s"} for row in rows]
    fitted = fit(shown, wide=wide, move=False, required=SESSION_COLUMNS[:7], shorten=("command", "scenario"),
                 optional=("scenario",))
    return "\n".join(p for p in (fitted.text, total_line(rows), fitted.footer()) if p)


def total_line(rows: list[dict]) -> str:
    """Where more than one session has results, their run times added up: a file run in parts (a precision a
    session, say, each within one machine's lease) took this much in all. Empty otherwise."""
    measured = [row for row in rows if row["results"]]
    if len(measured) < 2:
        return ""
    results = sum(row["results"] for row in measured)
    return (f"run time in all: {run_time(sum(row['run_s'] for row in measured))} "
            f"({len(measured)} sessions, {results} results)")
