"""`harness report`: an HTML page and a Markdown file with plots of the stored results."""

from __future__ import annotations

import click


@click.command("report")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--session", "sessions", multiple=True, metavar="ID", help="Only these sessions (repeatable).")
@click.option("--output", "-o", "output", default="reports", show_default=True, metavar="DIR",
              help="Folder for report.html, report.md and the plots' PNG files.")
def command(store_path, sessions, output) -> None:
    """Write DIR/report.html (self-contained) and DIR/report.md with PNG plots beside it."""
    from harness.compare import load_records
    from harness.report import write_report

    records = load_records(store_path, sessions)
    written = write_report(records, output)
    plots = [p for k, p in written.items() if k not in ("html", "markdown")]
    click.echo(f"wrote {written['html']} and {written['markdown']} ({len(plots)} plot(s)) from {len(records)} result(s)")
