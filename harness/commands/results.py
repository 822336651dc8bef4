"""`harness results`: what the store holds, as a table or exported."""

from __future__ import annotations

import json

import click

FORMATS = ("table", "csv", "json", "parquet")


def flatten_for_csv(frame):
    """Dict and list columns as JSON text, so a CSV cell holds them losslessly."""
    out = frame.copy()
    for column in out.columns:
        if out[column].map(lambda v: isinstance(v, (dict, list))).any():
            out[column] = out[column].map(lambda v: json.dumps(v, default=str) if isinstance(v, (dict, list)) else v)
    return out


@click.command("results")
@click.option("--store", "store_path", default=None, help="SQLite store (default harness.db or $HARNESS_STORE).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--session", default=None, help="Only this session's results.")
@click.option("--output", "-o", default=None, help="Write to this file instead of standard output (needed for parquet).")
def command(store_path, fmt, session, output) -> None:
    """Print or export the stored results (json: an array of result records)."""
    from harness.errors import InputError
    from harness.store import load_results
    from harness.table import summary_table

    frame = load_results(store_path, session=session)
    records = frame.to_dict(orient="records")
    if fmt == "table":
        text = summary_table(records)
    elif fmt == "json":
        text = json.dumps([{k: _plain(v) for k, v in r.items()} for r in records], indent=1, default=str)
    elif fmt == "csv":
        text = flatten_for_csv(frame).to_csv(index=False)
    else:
        if not output:
            raise InputError("--format parquet needs --output FILE", field="--output")
        try:
            flatten_for_csv(frame).to_parquet(output, index=False)
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


def _plain(value):
    # pandas gives NaN for missing floats: null in JSON, as the record contract says
    if isinstance(value, float) and value != value:
        return None
    return value
