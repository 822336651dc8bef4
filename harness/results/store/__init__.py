"""The results store: where records live, one row per result, committed as each arrives.

A store is anything that implements `Store` (contract.py): the session, compare, report, the results page
and the commands call nothing else on one. `open_store(location, readonly=...)` opens the store a
location names, by its scheme (`registry`: the `harness.stores` entry points): an SQLite file for a path
(`sqlite.SQLiteStore`), a PostgreSQL database for a postgresql:// URL (`postgres.PostgresStore`), the same
store on a server that jobs and people on many hosts share. Both are `sqlstore.SQLStore`: one write path,
one set of queries (`queries`), with only their dialects apart.

Nothing measured is lost (docs/reliability.md):

- A store is checked when it is opened (`opening`): a damaged file, a file that is not a harness
  store, or an existing 0-byte file is refused before anything runs (StoreError: exit 2), and left
  exactly as it was; a new store is created whole.
- A result that cannot be stored in mid-session (a full disk, a damaged page) is kept, with every
  other result this process measured and its session's plan, in a side file beside the store
  (`sidefiles`), and StoreWriteError names it. `harness results --import FILE` takes it back in
  (`imports`; a damaged store too, row by row: `salvage`), and the next `harness run` into that
  store takes in the side files beside it.
- A session whose process ended without closing it (kill -9, a power cut) is marked `abandoned`
  the next time the store is opened for writing: each session records its owner (`liveness`), so a
  reused pid does not keep a dead session `running`.

`frame` gives results as a pandas DataFrame.
"""

from harness.results.store.contract import Store, StoreClass, open_store, store_exists
from harness.results.store.failures import explain
from harness.results.store.frame import load_results, records_frame
from harness.results.store.imports import read_importable, read_rows
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.location import (
    DEFAULT_STORE,
    StoreLocation,
    default_store_path,
    parse_location,
)
from harness.results.store.opening import BUSY_TIMEOUT_MS
from harness.results.store.registry import redact
from harness.results.store.schema import SQLITE_HEADER
from harness.results.store.sidefiles import SIDE_MARK
from harness.results.store.sqlite import SQLiteStore

__all__ = [
    "BUSY_TIMEOUT_MS", "DEFAULT_STORE", "SIDE_MARK", "SQLITE_HEADER", "SQLiteStore", "Store", "StoreClass",
    "StoreLocation", "default_store_path", "explain", "load_results", "open_store", "owner_alive", "parse_location",
    "process_owner", "read_importable", "read_rows", "records_frame", "redact", "store_exists",
]
