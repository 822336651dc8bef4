"""The Store: one SQLite file, one row per result, committed as each arrives; the sessions that made them.

WAL journaling and a busy timeout let several `harness run` processes write one store at once;
every insert is its own transaction, so an interrupted session keeps what it measured. Records
enter as `Result` objects and leave as `Result` objects (`results()`), or as the flat rows they are
stored as (`records()`, for exports and pandas).
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from harness.errors import StoreError
from harness.results.record import Result, utc_now
from harness.results.store.failures import damaged, explain
from harness.results.store.imports import read_rows
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.opening import open_readonly, open_writable
from harness.results.store.postgres import PostgresStore, is_server_url
from harness.results.store.queries import StoreQueries
from harness.results.store.schema import (
    SESSION_KEYS,
    clean,
    imported_session_row,
    insert_result,
    result_row,
    stored_record,
)
from harness.results.store.sidefiles import Unsaved

DEFAULT_STORE = "harness.db"


def default_store_path(given: str | os.PathLike | None = None) -> str:
    """The store a command uses: `given` (its --store), else `HARNESS_STORE` if set (a file or a postgresql://
    URL), else harness.db in the working folder. StoreError for a --store given empty (`--store ''`), which
    names no store."""
    if given is not None and not str(given).strip():
        raise StoreError(f"--store {str(given)!r}: expected the path of a store file or a postgresql:// URL, got an "
                         "empty one", source=str(given), field="--store")
    return str(given) if given is not None else os.environ.get("HARNESS_STORE") or DEFAULT_STORE


def store_exists(path: str) -> bool:
    """Whether there is a store to read at path: a file that exists, or any database server URL (connecting
    says whether it holds a store)."""
    return is_server_url(path) or Path(path).exists()


class Store(StoreQueries):
    """A SQLite results store. Opening it checks it (StoreError if it is damaged, not a harness store,
    or cannot be written), unless it is opened `readonly`, which checks it can be read (reading
    results needs no write access: a store on a read-only mount, an archived artifact).

    A postgresql:// URL opens a `PostgresStore` instead: same methods, same behaviour, on a server."""

    def __new__(cls, path: str | os.PathLike | None = None, *, readonly: bool = False):
        target = str(path or default_store_path())
        if cls is Store and is_server_url(target):
            return PostgresStore(target, readonly=readonly)
        return super().__new__(cls)

    def reopen(self, *, readonly: bool = True) -> "Store":
        """The same store through a new connection."""
        return Store(self.path, readonly=readonly)

    def __init__(self, path: str | os.PathLike | None = None, *, readonly: bool = False):
        self.path = default_store_path(path)
        self.readonly = readonly
        #: every record this process added and every session it ran, for a side file if the store fails
        self._unsaved = Unsaved(self.path)
        #: sessions found `running` with their process gone, marked `abandoned` when opened
        self.abandoned: list[str] = []
        parent = Path(self.path).resolve().parent
        if not parent.is_dir():
            raise StoreError(f"store {self.path}: folder {parent} does not exist", source=self.path, field="--store")
        if Path(self.path).is_dir():
            raise StoreError(f"store {self.path}: is a folder; expected a store file", source=self.path, field="--store")
        self._db = self._open_readonly() if readonly else self._open_writable()
        self._columns = self._session_columns()
        if not readonly:
            self._mark_abandoned()

    @property
    def side_file(self) -> str | None:
        """The side file this process wrote when the store could not take a result, or None."""
        return self._unsaved.path

    # ------------------------------------------------------------------ opening
    def _open_writable(self) -> sqlite3.Connection:
        return open_writable(self.path)

    def _open_readonly(self) -> sqlite3.Connection:
        return open_readonly(self.path)

    def _session_columns(self) -> tuple[str, ...]:
        have = {r[1] for r in self._db.execute("PRAGMA table_info(sessions)")}
        return tuple(k for k in SESSION_KEYS if k in have)

    def _mark_abandoned(self) -> None:
        """Sessions left `running` by a process that has ended become `abandoned` (best effort)."""
        if "owner" not in self._columns:
            return
        try:
            rows = self._db.execute("SELECT session_id, owner FROM sessions WHERE state='running' AND owner IS NOT NULL").fetchall()
            for session_id, owner in rows:
                try:
                    alive = owner_alive(json.loads(owner))
                except ValueError:
                    continue
                if alive is False:
                    self._db.execute("UPDATE sessions SET state='abandoned', finished_at=? WHERE session_id=? AND state='running'",
                                     (utc_now(), session_id))
                    self.abandoned.append(session_id)
        except sqlite3.Error:
            pass  # marking is housekeeping; a store that cannot take it fails on its first real write

    def _read(self, query: str, args: tuple = ()) -> list:
        try:
            return self._db.execute(query, args).fetchall()
        except sqlite3.DatabaseError as exc:
            if "malformed" in str(exc).lower():
                raise damaged(self.path, str(exc)) from None
            raise StoreError(f"store {self.path}: cannot be read: {explain(exc)}", source=self.path, field="--store") from None

    # ------------------------------------------------------------------ writing
    def add(self, result: Result) -> None:
        """Insert one result record and commit it.

        StoreWriteError if it cannot be stored; then it is kept in a side file with every other
        record this process added, and the error names the file.
        """
        record = stored_record(result)
        self._unsaved.records.append(record)
        try:
            self._db.execute(insert_result("REPLACE"), result_row(record))
        except sqlite3.Error as exc:
            raise self._unsaved.keep(exc) from None
        # the record into the store file itself, not only its write-ahead log: a .db copied or carried
        # without its -wal (a GPU machine that gives back a few files) then still holds every record.
        # PASSIVE waits for no reader or writer; what it cannot copy now goes with a later record.
        try:
            self._db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # the record is committed in the log either way

    def begin_session(self, session_id: str, plan: list[dict], *, scenario_path: str | None, command: str,
                      settings: dict | None = None) -> None:
        """Record a session, its plan and the settings that shape its runs (so --resume runs the rest alike)."""
        row = {"session_id": session_id, "started_at": utc_now(), "finished_at": None, "state": "running",
               "scenario_path": scenario_path, "command": command, "plan": plan, "settings": settings or {},
               "owner": process_owner()}
        self._unsaved.sessions[session_id] = row
        try:
            self._db.execute(
                "INSERT OR IGNORE INTO sessions (session_id, started_at, state, scenario_path, command, plan, settings, owner)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (session_id, row["started_at"], "running", scenario_path, command, json.dumps(plan, default=str),
                 json.dumps(row["settings"], default=str), json.dumps(row["owner"])),
            )
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot record the session, nothing was run: {explain(exc)}",
                             source=self.path, field="--store") from None

    def reopen_session(self, session_id: str) -> None:
        """A resumed session runs again: `running`, owned by this process (StoreError if the store cannot take it)."""
        owner = process_owner()
        if session_id in self._unsaved.sessions:
            self._unsaved.sessions[session_id].update(state="running", finished_at=None, owner=owner)
        try:
            self._db.execute("UPDATE sessions SET state='running', finished_at=NULL, owner=? WHERE session_id=?",
                             (json.dumps(owner), session_id))
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot resume session {session_id}, nothing was run: {explain(exc)}",
                             source=self.path, field="--store") from None

    def end_session(self, session_id: str, state: str) -> None:
        """Mark a session finished, interrupted or failed (StoreError if the store cannot take it)."""
        if session_id in self._unsaved.sessions:
            self._unsaved.sessions[session_id].update(state=state, finished_at=utc_now())
        try:
            self._db.execute(
                "UPDATE sessions SET finished_at=?, state=? WHERE session_id=?", (utc_now(), state, session_id)
            )
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot mark session {session_id} {state}: {explain(exc)}",
                             source=self.path, field="--store") from None

    # ------------------------------------------------------------------ side files and imports
    def import_file(self, path: str | os.PathLike) -> dict:
        """Take in the records and sessions of a side file, a JSON array of records (`harness results
        --format json`) or another store, damaged or not (every row it can still read).

        Records already present (same run_id) are left as they are. Returns counts:
        records, new, sessions, new_sessions, unreadable.
        """
        records, sessions, unreadable = read_rows(path)  # copied as they are: an import adds no field
        try:
            self._db.execute("BEGIN IMMEDIATE")
            new = sum(self._db.execute(insert_result("IGNORE"), result_row(clean(r))).rowcount for r in records)
            new_sessions = sum(self._insert_session(s) for s in sessions)
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            raise StoreError(f"store {self.path}: cannot take in {path}, nothing was taken in: {explain(exc)}",
                             source=self.path, field="--store") from None
        return {"records": len(records), "new": new, "sessions": len(sessions), "new_sessions": new_sessions,
                "unreadable": unreadable}

    def _insert_session(self, s: dict) -> int:
        """Insert an imported session unless its id is stored already (1 if it was new); one left `running`
        by the process that wrote it is `interrupted` here."""
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO sessions (session_id, started_at, finished_at, state, scenario_path, command, plan,"
            " settings, owner) VALUES (?,?,?,?,?,?,?,?,?)", imported_session_row(s, s.get("command")))
        return cursor.rowcount
