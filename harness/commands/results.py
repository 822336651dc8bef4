"""`harness results`: what the store holds, as a table or exported; `--import` takes results back in."""

from __future__ import annotations

import json

import click

FORMATS = ("table", "csv", "json", "parquet")


def _integer_fields() -> list[str]:
    """Record fields typed `int | None` (byte counts...): exported as integers even where some are null."""
    import dataclasses

    from harness.record import Result

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
def command(store_path, fmt, session, output, imports) -> None:
    """Print or export the stored results (json: an array of result records), or --import some."""
    from pathlib import Path

    from harness.errors import InputError
    from harness.store import Store, default_store_path, read_importable, records_frame
    from harness.table import summary_table

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
        session_ids = None
        if session:
            matches = store.find_sessions(session)
            if len(matches) > 1:
                raise InputError(f"--session {session}: {len(matches)} sessions match ({', '.join(matches[:10])}); give "
                                 "more of the id", source=path, field="--session")
            session_ids = matches or [session]  # a session known only by its results is matched on them
        records = store.records(session_ids)
        for side in store.side_files():
            click.echo(f"note: {side} holds results this store could not take when they were measured; take them in "
                       f"with: harness results --import {side} --store {path}", err=True)
    if fmt == "table":
        text = summary_table(records)
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

