"""Results as a pandas DataFrame, one row per record, the public fields first."""

from __future__ import annotations

import os

from harness.errors import InputError
from harness.results.record import FIELDS, Result
from harness.results.store.contract import open_store, store_exists
from harness.results.store.location import parse_location


def records_frame(records: list[Result] | list[dict]):
    """A pandas DataFrame, one row per record, the public fields first. Takes Results or the flat rows
    `Store.records()` gives; exports pass the rows, so a record an earlier version stored keeps its
    own fields (a field it lacks stays empty, not this version's default)."""
    import pandas as pd  # deferred: pandas is only needed by exports and notebooks, and is slow to import

    rows = [r.to_dict() if isinstance(r, Result) else r for r in records]
    frame = pd.DataFrame.from_records(rows)
    if frame.empty:
        return pd.DataFrame(columns=list(FIELDS))
    ordered = [c for c in FIELDS if c in frame.columns] + [c for c in frame.columns if c not in FIELDS]
    return frame[ordered]


def load_results(store: str | os.PathLike | None = None, *, session: str | None = None):
    """Every result record in the store as a pandas DataFrame, one row per record."""
    location = parse_location(store)
    if not store_exists(location):
        raise InputError(f"store {location.display}: no such file", source=location.display, field="--store")
    with open_store(location, readonly=True) as s:
        return records_frame(s.records([session] if session else None))
