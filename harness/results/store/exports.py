"""The stored records written out for other tools: a JSON array, CSV, parquet.

Exports take the flat rows as stored (`Store.records()`), so a record an earlier version stored is
exported with its own fields; `harness results --import` takes a JSON export back in.
"""

from __future__ import annotations

import dataclasses
import json

from harness.errors import InputError
from harness.results.record import Result
from harness.results.store.frame import records_frame

#: What a spreadsheet takes a cell starting with for a formula (`=HYPERLINK(...)`, `=cmd|' /C calc'!A0`), tab and
#: carriage return included (OWASP, "CSV injection").
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(value):
    """A CSV cell as a spreadsheet shows it as text: text starting with a formula's first character gets a leading
    `'`; anything else (numbers, blanks, other text) is as it was."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_LEADS) else value


def spreadsheet_safe(frame):
    """A frame whose text cells are `spreadsheet_text`; its number columns untouched."""
    out = frame.copy()
    for column in out.select_dtypes(include=["object", "string"]).columns:  # text (pandas 2: object; 3: str)
        out[column] = out[column].map(spreadsheet_text)
    return out


def _integer_fields() -> list[str]:
    """Record fields typed `int | None` (byte counts...): exported as integers even where some are null."""
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


def export_text(records: list[dict], fmt: str) -> str:
    """Stored rows as a JSON array of records (integers stay integers, null stays null) or as CSV (text that a
    spreadsheet would run as a formula given a leading `'`)."""
    if fmt == "json":
        return json.dumps(records, indent=1, default=str)
    if fmt == "csv":
        return spreadsheet_safe(flatten_for_csv(records_frame(records))).to_csv(index=False)
    raise ValueError(f"not a text export format: {fmt!r}")


def write_parquet(records: list[dict], output: str) -> None:
    """Stored rows as a parquet file (InputError where pyarrow is not installed)."""
    try:
        flatten_for_csv(records_frame(records)).to_parquet(output, index=False)
    except ImportError as exc:
        raise InputError(f"--format parquet needs pyarrow (pip install 'harness[parquet]'): {exc}", field="--format") from None
