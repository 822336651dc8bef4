"""The SQLite store: one file, one row per result, committed as each arrives; the sessions that made them.

WAL journaling and a busy timeout let several `harness run` processes write one store at once (`opening`);
every insert is its own transaction, so an interrupted session keeps what it measured. What it shares with
every SQL store is `sqlstore.SQLStore`; what is SQLite's own is here: the file's checks, `INSERT OR ...`,
`BEGIN IMMEDIATE`, the checkpoint after each record, what an SQLite error means, and a session's owner
checked on this host only (a store file is written from one host at a time).
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from harness.errors import StoreError
from harness.results.store.failures import damaged, explain
from harness.results.store.location import StoreLocation, parse_location
from harness.results.store.opening import open_readonly, open_writable
from harness.results.store.schema import SESSION_KEYS
from harness.results.store.sqlstore import SQLStore


class SQLiteStore(SQLStore):
    """A results store in an SQLite file (a path). Opening it checks it (StoreError if it is damaged, not a harness
    store, or cannot be written), unless it is opened `readonly`, which checks it can be read (reading results
    needs no write access: a store on a read-only mount, an archived artifact)."""

    ORDER = "rowid"
    errors = (sqlite3.Error,)

    @classmethod
    def exists(cls, location: StoreLocation | str) -> bool:
        """Whether there is a file at the location."""
        return Path(parse_location(location).target).exists()

    def _side_file_base(self) -> str:
        return self.location.target

    def _connect(self) -> sqlite3.Connection:
        path = self.location.target
        parent = Path(path).resolve().parent
        if not parent.is_dir():
            raise StoreError(f"store {self.path}: folder {parent} does not exist", source=self.path, field="--store")
        if Path(path).is_dir():
            raise StoreError(f"store {self.path}: is a folder; expected a store file", source=self.path, field="--store")
        return self._open_readonly() if self.readonly else self._open_writable()

    def _open_writable(self) -> sqlite3.Connection:
        return open_writable(self.location.target)

    def _open_readonly(self) -> sqlite3.Connection:
        return open_readonly(self.location.target)

    def _session_columns(self) -> tuple[str, ...]:
        have = {r[1] for r in self._db.execute("PRAGMA table_info(sessions)")}
        return tuple(k for k in SESSION_KEYS if k in have)

    def _execute(self, sql: str, args: tuple = ()):
        return self._db.execute(sql, args)

    def _insert(self, table: str, columns: tuple[str, ...], conflict: str, extra: dict[str, str] | None = None) -> str:
        extra = extra or {}
        values = ",".join(["?"] * len(columns) + list(extra.values()))
        return f"INSERT OR {conflict.upper()} INTO {table} ({', '.join((*columns, *extra))}) VALUES ({values})"

    @contextlib.contextmanager
    def _transaction(self):
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _explain(self, exc: BaseException) -> str:
        return explain(exc)

    def _read_failed(self, exc: BaseException) -> StoreError:
        if "malformed" in str(exc).lower():
            return damaged(self.path, str(exc))
        return super()._read_failed(exc)

    def close(self) -> None:
        """Move the write-ahead log into the store file, then close. Where the file no longer takes writes (made
        immutable or read-only under the session) the log is the only place of the last records: `unmerged` says
        so, and where. A reader holding the log back is no failure: the last connection to close moves it."""
        if not self.readonly:
            try:
                self._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            except sqlite3.Error as exc:
                if not any(word in str(exc).lower() for word in ("locked", "busy")):
                    self.unmerged = unmerged_log(self.path, self.location.target, exc)
        super().close()

    def _added(self) -> None:
        # the record into the store file itself, not only its write-ahead log: a .db copied or carried
        # without its -wal (a GPU machine that gives back a few files) then still holds every record.
        # PASSIVE waits for no reader or writer; what it cannot copy now goes with a later record.
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # the record is committed in the log either way


def unmerged_log(shown: str, target: str, exc: BaseException) -> str:
    """Where a store's last records are when SQLite could not move its write-ahead log into the file."""
    log = f"{target}-wal"
    return (f"store {shown}: its last records are only in {log}: SQLite could not write them into {target} "
            f"({explain(exc, target)}). Keep {log} beside {target}: SQLite reads both, and {target} copied alone lacks "
            f"them; the next harness command that writes to the store once {target} can be written again (its "
            f"permissions, its immutable flag, free space) moves them in")
