"""`harness report`: an HTML page and a Markdown file with plots of the stored results."""

from __future__ import annotations

import click

from harness.errors import InputError
from harness.present.report import write_report
from harness.results.compare import load_records
from harness.results.sessions import UnfinishedSession
from harness.results.store import open_store
from harness.session.resume import settled_results, work_left


@click.command("report")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--session", "sessions", multiple=True, metavar="ID", help="Only these sessions (repeatable).")
@click.option("--output", "-o", "output", default="reports", show_default=True, metavar="DIR",
              help="Folder for report.html, report.md and the plots' PNG files.")
def command(store_path, sessions, output) -> None:
    """Write DIR/report.html (self-contained) and DIR/report.md with PNG plots beside it."""

    if not output.strip():  # an empty path is the working folder to the OS: the report would land there unasked
        raise InputError(f"--output {output!r}: expected the folder to write the report into, got an empty path",
                         field="--output")
    records = load_records(store_path, sessions)
    written = write_report(records, output, sessions=unfinished_sessions(store_path, records))
    plots = [p for k, p in written.items() if k not in ("html", "markdown")]
    click.echo(f"wrote {written['html']} and {written['markdown']} ({len(plots)} plot(s)) from {len(records)} result(s)")


def unfinished_sessions(store_path, records) -> list[UnfinishedSession]:
    """The sessions of these records that did not finish (interrupted, failed, abandoned, still running),
    each with its planned runs (capacity searches, for a capacity session) and how many of them have no ok
    result (what `--resume` would run)."""

    out = []
    with open_store(store_path, readonly=True) as store:
        for session_id in dict.fromkeys(r.session_id for r in records):
            session = store.session(str(session_id)) if session_id else None
            if session is None or session.state == "finished":
                continue
            try:
                left, planned, what = work_left(session, settled_results(store, session.session_id))
            except ValueError:  # a plan this version cannot read: what is left of it cannot be told
                continue
            out.append(UnfinishedSession(session.session_id, session.state, planned, left, what))
    return out
