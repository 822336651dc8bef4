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

from harness.errors import InputError, StoreError
from harness.results.record import Result, utc_now
from harness.results.store.failures import damaged, explain
from harness.results.store.imports import read_rows
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.opening import open_readonly, open_writable
from harness.results.store.schema import (
    SESSION_KEYS,
    clean,
    insert_result,
    result_row,
    stored_record,
)
from harness.results.store.sidefiles import Unsaved, side_files

DEFAULT_STORE = "harness.db"


def default_store_path(given: str | os.PathLike | None = None) -> str:
    """The store a command uses: `given` (its --store), else `HARNESS_STORE` if set, else harness.db in the
    working folder. StoreError for a --store given empty (`--store ''`), which names no file."""
    if given is not None and not str(given).strip():
        raise StoreError(f"--store {str(given)!r}: expected the path of a store file, got an empty one",
                         source=str(given), field="--store")
    return str(given) if given is not None else os.environ.get("HARNESS_STORE") or DEFAULT_STORE


class Store:
    """A SQLite results store. Opening it checks it (StoreError if it is damaged, not a harness store,
    or cannot be written), unless it is opened `readonly`, which checks it can be read (reading
    results needs no write access: a store on a read-only mount, an archived artifact)."""

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

    def close(self) -> None:
        """Close the connection (every result is committed already)."""
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
    def side_files(self) -> list[Path]:
        """Side files beside this store, left by a process that could not store its results."""
        return side_files(self.path)

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
        state = "interrupted" if s.get("state") == "running" else s.get("state") or "interrupted"
        cursor = self._db.execute(
            "INSERT OR IGNORE INTO sessions (session_id, started_at, finished_at, state, scenario_path, command, plan,"
            " settings, owner) VALUES (?,?,?,?,?,?,?,?,?)",
            (s["session_id"], s.get("started_at") or utc_now(), s.get("finished_at"), state, s.get("scenario_path"),
             s.get("command"), json.dumps(s.get("plan") or [], default=str),
             json.dumps(s.get("settings") or {}, default=str), json.dumps(s.get("owner")) if s.get("owner") else None))
        return cursor.rowcount

    # ------------------------------------------------------------------ reading
    def results(self, session_ids: list[str] | None = None) -> list[Result]:
        """Every stored record (of the given sessions), oldest first, typed."""
        return [Result.from_dict(row) for row in self.records(session_ids)]

    def records(self, session_ids: list[str] | None = None) -> list[dict]:
        """Every stored record (of the given sessions), oldest first, as the flat rows exports and pandas take."""
        query = "SELECT record FROM results"
        args: tuple = ()
        if session_ids:
            query += f" WHERE session_id IN ({','.join('?' * len(session_ids))})"
            args = tuple(session_ids)
        query += " ORDER BY started_at, rowid"
        return [json.loads(row[0]) for row in self._read(query, args)]

    def find_sessions(self, session_id: str) -> list[str]:
        """Ids of the stored sessions an id names: itself, else those it is a prefix of (compared
        literally: `%` and `_` are characters like any other)."""
        if not session_id:
            return []
        ids = [r[0] for r in self._read("SELECT session_id FROM sessions")]
        if session_id in ids:
            return [session_id]
        return sorted(i for i in ids if isinstance(i, str) and i.startswith(session_id))

    def resolve_session(self, prefix: str) -> str:
        """The one session an id (or a unique prefix of one) names: a stored session, else the session of
        stored records (imported without their session). InputError, naming the sessions, otherwise."""
        matches = self.find_sessions(prefix)
        if len(matches) > 1:
            raise InputError(f"--session {prefix}: {len(matches)} sessions match ({', '.join(matches[:10])}); give "
                             "more of the id", source=self.path, field="--session")
        if not matches:
            matches = sorted({r["session_id"] for r in self.records() if str(r.get("session_id")).startswith(prefix)})
        if len(matches) != 1:
            known = ", ".join(f"{s['session_id']} ({s.get('started_at') or '?'}, {s.get('state') or '?'})"
                              for s in self.sessions()) or "none"
            raise InputError(f"store {self.path}: no single session matches {prefix!r} (sessions: {known}); "
                             f"harness results --sessions lists them", source=self.path, field="--session")
        return matches[0]

    def session(self, session_id: str) -> dict | None:
        """A stored session with its plan and settings, or None. A unique prefix of the id is enough."""
        matches = self.find_sessions(session_id)
        if len(matches) != 1:
            return None
        rows = self._read(f"SELECT {', '.join(self._columns)} FROM sessions WHERE session_id = ?", (matches[0],))
        out = dict(zip(self._columns, rows[0]))
        for key, empty in (("plan", []), ("settings", {}), ("owner", None)):
            try:
                out[key] = json.loads(out[key]) if out.get(key) else empty
            except ValueError:
                out[key] = empty
        self._unsaved.sessions.setdefault(out["session_id"], dict(out))
        return out

    def sessions(self) -> list[dict]:
        """Every session, newest last, with its counts of results by status."""
        rows = self._read(
            "SELECT s.session_id, s.started_at, s.state, s.scenario_path, COUNT(r.run_id),"
            " SUM(r.status = 'ok') FROM sessions s LEFT JOIN results r ON r.session_id = s.session_id"
            " GROUP BY s.session_id ORDER BY s.started_at"
        )
        keys = ("session_id", "started_at", "state", "scenario_path", "results", "ok")
        return [dict(zip(keys, row)) for row in rows]

    def ok_run_keys(self, session_id: str) -> set[str]:
        """run_keys of a session that have an `ok` result."""
        rows = self._read("SELECT DISTINCT run_key FROM results WHERE session_id=? AND status='ok'", (session_id,))
        return {r[0] for r in rows}

    def ok_medians(self, run_key: str) -> list[float]:
        """The medians of every `ok` record of one configuration (any session), oldest first."""
        rows = self._read("SELECT median FROM results WHERE run_key=? AND status='ok' AND median IS NOT NULL"
                          " ORDER BY started_at, rowid", (run_key,))
        return [float(r[0]) for r in rows]

    def ok_results(self, session_id: str) -> list[tuple[str, int | None]]:
        """(run_key, replicate or None) of every `ok` result of a session: one entry per result, so
        a configuration planned several times is counted as often as it finished."""
        out = []
        for run_key, text in self._read("SELECT run_key, record FROM results WHERE session_id=? AND status='ok'", (session_id,)):
            try:
                replicate = json.loads(text).get("replicate")
            except (ValueError, AttributeError):
                replicate = None
            out.append((run_key, replicate if isinstance(replicate, int) and not isinstance(replicate, bool) else None))
        return out
