"""The results store: an embedded SQLite file, one row per result, committed as each arrives.

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

The store itself is `database.Store`; a postgresql:// URL opens `postgres.PostgresStore`, the same store on a
database server that jobs and people on many hosts share (its queries are `queries.StoreQueries`, shared by
both). `frame` gives results as a pandas DataFrame.
"""

from harness.results.store.database import (
    DEFAULT_STORE,
    Store,
    default_store_path,
    store_exists,
)
from harness.results.store.failures import explain
from harness.results.store.frame import load_results, records_frame
from harness.results.store.imports import read_importable, read_rows
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.opening import BUSY_TIMEOUT_MS
from harness.results.store.postgres import PostgresStore, is_server_url, redact
from harness.results.store.schema import SQLITE_HEADER
from harness.results.store.sidefiles import SIDE_MARK

__all__ = [
    "BUSY_TIMEOUT_MS", "DEFAULT_STORE", "SIDE_MARK", "SQLITE_HEADER", "Store", "default_store_path", "explain",
    "PostgresStore", "is_server_url", "load_results", "owner_alive", "process_owner", "read_importable", "read_rows",
    "records_frame", "redact", "store_exists",
]
