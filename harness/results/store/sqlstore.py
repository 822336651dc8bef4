"""A results store in an SQL database, written once for every dialect: opening, the write path, closing.

`SQLStore` holds what the SQLite and PostgreSQL stores do alike: a record committed as it arrives and kept
in a side file where the store cannot take it, sessions begun, resumed and ended with their owner,
imports in one transaction, sessions whose owner is gone marked `abandoned`. Its SQL uses `?`
placeholders. A dialect (sqlite.SQLiteStore, postgres.PostgresStore) supplies only what differs, in the
hooks at the end of the class: the connection, how a statement runs, an insert that ignores or replaces a
row already there, a transaction, the error classes and their words, which running sessions may be
abandoned, and how a session is taken back.
"""

from __future__ import annotations

import contextlib
import json
from typing import ClassVar

from harness.errors import StoreError, StoreWriteError
from harness.results.record import Result, utc_now
from harness.results.sessions import (
    PlanEntry,
    SessionOwner,
    SessionRow,
    SessionSettings,
)
from harness.results.store.imports import read_rows
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.location import StoreLocation, parse_location
from harness.results.store.queries import StoreQueries
from harness.results.store.schema import (
    RESULT_COLUMNS,
    SESSION_KEYS,
    clean,
    imported_session_row,
    result_row,
    stored_record,
)
from harness.results.store.sidefiles import Unsaved

#: The columns a new session's row is written with.
BEGUN_COLUMNS = ("session_id", "started_at", "state", "scenario_path", "command", "plan", "settings", "owner")


class SQLStore(StoreQueries):
    """A results store in an SQL database. Opening it checks it (StoreError, exit 2, for a store that is damaged,
    not a harness store, or cannot be written or reached) and marks abandoned sessions, unless it is opened
    `readonly`, which checks only that it can be read."""

    #: what the database driver raises
    errors: ClassVar[tuple[type[BaseException], ...]] = ()

    def __init__(self, location: StoreLocation | str, *, readonly: bool = False):
        self.location = parse_location(location)
        self.path, self.readonly = self.location.display, readonly
        #: sessions found `running` with their owner gone, marked `abandoned` when opened for writing
        self.abandoned: list[str] = []
        self.unmerged: str | None = None  # once closed: the Store protocol's
        self._unsaved = Unsaved(self._side_file_base())
        self._db = self._connect()
        try:
            self._opened()
            self._columns = self._session_columns()
            if not readonly:
                self._mark_abandoned()
        except BaseException:
            self._db.close()
            raise

    def reopen(self, *, readonly: bool = True) -> SQLStore:
        """The same store through a new connection."""
        return type(self)(self.location, readonly=readonly)

    def _failed(self, what: str, exc: BaseException) -> StoreError:
        """The one-line StoreError for a failed statement: the store, what could not be done, and why."""
        return StoreError(f"store {self.path}: {what}: {self._explain(exc)}", source=self.path, field="--store")

    def _read(self, query: str, args: tuple = ()) -> list:
        try:
            return self._execute(query, args).fetchall()
        except self.errors as exc:
            raise self._read_failed(exc) from None

    # ------------------------------------------------------------------ writing
    def add(self, result: Result) -> None:
        """Insert one result record and commit it. StoreWriteError if it cannot be stored; then it is kept in a
        side file with every other record this process added, and the error names the file."""
        record = stored_record(result)
        self._unsaved.records.append(record)
        try:
            self._execute(self._insert("results", RESULT_COLUMNS, "replace"), result_row(record))
        except self.errors as exc:
            raise self._kept(exc) from None
        self._added()

    def begin_session(self, session_id: str, plan: list[PlanEntry], *, scenario_path: str | None, command: str,
                      settings: SessionSettings | None = None) -> None:
        """Record a session, its plan and the settings that shape its runs (so --resume runs the rest alike)."""
        command = self._stored_command(command)
        plan_rows = [entry.to_dict() for entry in plan]
        row = {"session_id": session_id, "started_at": utc_now(), "finished_at": None, "state": "running",
               "scenario_path": scenario_path, "command": command, "plan": plan_rows,
               "settings": settings.to_dict() if settings is not None else {}, "owner": process_owner()}
        self._unsaved.sessions[session_id] = row
        values = (session_id, row["started_at"], "running", scenario_path, command, json.dumps(plan_rows, default=str),
                  json.dumps(row["settings"], default=str), json.dumps(row["owner"]))
        try:
            self._execute(self._insert("sessions", BEGUN_COLUMNS, "ignore", self._BEGUN_EXTRA), values)
        except self.errors as exc:
            raise self._failed("cannot record the session, nothing was run", exc) from None
        self._running(session_id)

    def reopen_session(self, session_id: str, seen: dict | None = None) -> None:
        """A resumed session `running` again, owned by this process; StoreError if the store cannot take it, the dialect
        sees another process run it, or its owner is no longer `seen`'s (another `--resume` claimed it since)."""
        owner = process_owner()
        try:
            with self._transaction():  # read and claimed in one transaction: one claimant wins, the others see it
                _refuse_if_claimed(self, session_id, seen)
                self._take_session(session_id, json.dumps(owner))
        except self.errors as exc:
            raise self._failed(f"cannot resume session {session_id}, nothing was run", exc) from None
        _note_unsaved(self._unsaved, session_id, state="running", finished_at=None, owner=owner)
        self._running(session_id)

    def end_session(self, session_id: str, state: str) -> None:
        """Mark a session finished, interrupted or failed (StoreError if the store cannot take it)."""
        self._ended(session_id)
        _note_unsaved(self._unsaved, session_id, state=state, finished_at=utc_now())
        try:
            self._execute("UPDATE sessions SET finished_at = ?, state = ? WHERE session_id = ?",
                          (utc_now(), state, session_id))
        except self.errors as exc:
            raise self._failed(f"cannot mark session {session_id} {state}", exc) from None

    def import_file(self, path) -> dict:
        """Take in the records and sessions of a side file, a JSON array of records (`harness results --format
        json`) or another store, damaged or not (every row it can still read), in one transaction.

        Records already present (same run_id) are left as they are. Returns counts:
        records, new, sessions, new_sessions, unreadable.
        """
        records, sessions, unreadable = read_rows(path)  # copied as they are: an import adds no field
        try:
            with self._transaction():
                insert = self._insert("results", RESULT_COLUMNS, "ignore")
                new = sum(self._execute(insert, result_row(clean(r))).rowcount for r in records)
                new_sessions = sum(self._insert_session(SessionRow.model_validate(s)) for s in sessions)
        except self.errors as exc:
            raise self._failed(f"cannot take in {path}, nothing was taken in", exc) from None
        return {"records": len(records), "new": new, "sessions": len(sessions), "new_sessions": new_sessions,
                "unreadable": unreadable}

    def _insert_session(self, s: SessionRow) -> int:
        """Insert an imported session unless its id is stored already (1 if it was new); one left `running`
        by the process that wrote it is `interrupted` here."""
        command = self._stored_command(s.command) if s.command else s.command
        cursor = self._execute(self._insert("sessions", SESSION_KEYS, "ignore"), imported_session_row(s, command))
        return cursor.rowcount

    def _mark_abandoned(self) -> None:
        """Sessions left `running` by an owner that has ended (this host) or, where the dialect can tell, that stopped
        saying it is alive (any host), become `abandoned` (best effort)."""
        if "owner" not in self._columns:
            return
        try:
            for session_id, owner, stale in self._running_sessions():
                alive = _owner_alive(owner)
                if alive is False or (alive is None and stale):
                    self._execute("UPDATE sessions SET state = 'abandoned', finished_at = ?"
                                  " WHERE session_id = ? AND state = 'running'", (utc_now(), session_id))
                    self.abandoned.append(session_id)
        except self.errors:
            pass  # marking is housekeeping; a store that cannot take it fails on its first real write

    # ------------------------------------------------------------------ what a dialect supplies
    #: columns a new session's row gets beside BEGUN_COLUMNS, as SQL expressions (a server's clock)
    _BEGUN_EXTRA: ClassVar[dict[str, str]] = {}
    _ROW_LOCK: ClassVar[str] = ""  # ends a SELECT that holds its row (SQLite's BEGIN IMMEDIATE holds all)

    def _side_file_base(self) -> str:
        """The path side files of this store are named after (`<it>.unsaved-...json`)."""
        raise NotImplementedError

    def _connect(self):
        """A connection to the store (StoreError, one line, where there is none to be had)."""
        raise NotImplementedError

    def _opened(self) -> None:
        """Once connected: check the store, and make its tables unless `readonly` (StoreError otherwise; the
        connection is then closed)."""

    def _session_columns(self) -> tuple[str, ...]:
        """The session columns the store has."""
        return SESSION_KEYS

    def _execute(self, sql: str, args: tuple = ()):
        """Run one statement (`?` placeholders), committed unless inside `_transaction`; its cursor."""
        raise NotImplementedError

    def _insert(self, table: str, columns: tuple[str, ...], conflict: str, extra: dict[str, str] | None = None) -> str:
        """The INSERT of one row of `columns` (`?` placeholders; the first is the key), then `extra` columns' SQL
        expressions, where a row of the same key already there is kept (`ignore`) or replaced (`replace`)."""
        raise NotImplementedError

    def _transaction(self) -> contextlib.AbstractContextManager:
        """A block whose statements are committed together, or none of them."""
        raise NotImplementedError

    def _explain(self, exc: BaseException) -> str:
        """What a driver's error means, in one line of words (never a password)."""
        return str(exc)

    def _read_failed(self, exc: BaseException) -> StoreError:
        """The error for a query the store could not answer."""
        return self._failed("cannot be read", exc)

    def _kept(self, exc: BaseException) -> StoreWriteError:
        """Every record this process added written to a side file; the StoreWriteError that says where."""
        return self._unsaved.keep(exc)

    def _added(self) -> None:
        """After a record is committed."""

    def _stored_command(self, command: str | None) -> str | None:
        """A session's command line as the store keeps it."""
        return command

    def _running_sessions(self) -> list[tuple[str, str | None, bool]]:
        """(session id, owner as JSON, whether the owner stopped saying it is alive) of every `running` session."""
        return [(session_id, owner, False) for session_id, owner in
                self._execute("SELECT session_id, owner FROM sessions WHERE state = 'running'").fetchall()]

    def _take_session(self, session_id: str, owner: str) -> None:
        """Mark a stored session `running` again, owned by `owner` (JSON)."""
        self._execute("UPDATE sessions SET state = 'running', finished_at = NULL, owner = ? WHERE session_id = ?",
                      (owner, session_id))

    def _running(self, session_id: str) -> None:
        """After this process began or took back a session."""

    def _ended(self, session_id: str) -> None:
        """Before a session is marked ended."""


def _note_unsaved(unsaved: Unsaved, session_id: str, **changes) -> None:
    """The side file's copy of a session this process began, changed as its row was (where it holds one)."""
    if session_id in unsaved.sessions:
        unsaved.sessions[session_id].update(changes)


def _refuse_if_claimed(store: SQLStore, session_id: str, seen: dict | None) -> None:
    """StoreError (exit 2) naming the owner where `seen` (the session as read) is given and the stored owner is no
    longer its owner: another process claimed it after this one read it (run inside the claim's transaction)."""
    if seen is None or "owner" not in store._columns:
        return
    seen_owner = seen.get("owner")
    row = store._execute(f"SELECT owner, state FROM sessions WHERE session_id = ?{store._ROW_LOCK}",
                         (session_id,)).fetchone()
    if row is None:
        return
    try:
        held = json.loads(row[0]) if row[0] else None
    except ValueError:
        held = None
    if held == seen_owner:
        return
    owner = SessionOwner.of(held) if isinstance(held, dict) else None
    who = f"pid {owner.pid} on {owner.host}" if owner is not None else "another process"
    raise StoreError(f"--resume {session_id}: session {session_id} was claimed by {who} (now {row[1]}) after this "
                     "process read it; it runs what was left, so nothing was run here. Once it ends, resume "
                     "again for whatever it left", source=store.path, field="--resume")


def _owner_alive(owner: str | None) -> bool | None:
    """Whether the process a stored owner (JSON) names still runs; None where it cannot be told."""
    try:
        return owner_alive(json.loads(owner)) if owner else None
    except ValueError:
        return None
