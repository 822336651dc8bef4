"""The results store: an embedded SQLite file, one row per result, committed as each arrives.

WAL journaling and a busy timeout let several `harness run` processes write one store at once;
every insert is its own transaction, so an interrupted session keeps what it measured.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from pathlib import Path

from harness.errors import InputError
from harness.record import FIELDS, utc_now

DEFAULT_STORE = "harness.db"
BUSY_TIMEOUT_MS = 60_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    run_key TEXT,
    schema_version INTEGER NOT NULL,
    scenario TEXT, workload TEXT, backend TEXT, device TEXT, status TEXT,
    metric TEXT, median REAL, started_at TEXT,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_session ON results(session_id);
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    state TEXT NOT NULL,
    scenario_path TEXT,
    command TEXT,
    plan TEXT NOT NULL
);
"""


def default_store_path() -> str:
    """`HARNESS_STORE` if set, else harness.db in the working folder."""
    return os.environ.get("HARNESS_STORE") or DEFAULT_STORE


def _clean(value):
    # JSON has no NaN/inf; a figure that is not finite was not measured: null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class Store:
    """A SQLite results store. Opening it checks it can be written (InputError if not), unless it is
    opened `readonly` (reading results needs no write access: a store on a read-only mount, an
    archived artifact)."""

    def __init__(self, path: str | os.PathLike | None = None, *, readonly: bool = False):
        self.path = str(path or default_store_path())
        parent = Path(self.path).resolve().parent
        if not parent.is_dir():
            raise InputError(f"store {self.path}: folder {parent} does not exist", source=self.path, field="--store")
        if readonly:
            self._db = self._open_readonly()
            return
        try:
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            self._db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            # prove it is writable now, not after the first hour of measuring
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise InputError(f"store {self.path}: cannot be opened for writing: {exc}", source=self.path, field="--store") from None

    def _open_readonly(self) -> sqlite3.Connection:
        # A WAL store in a folder we cannot write needs immutable=1 (no -shm file can be made);
        # plain mode=ro first, so a store another process is writing is read consistently.
        uri = Path(self.path).resolve().as_uri()
        error = None
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(uri + query, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
                db.execute("SELECT 1 FROM results LIMIT 1").fetchall()
                return db
            except sqlite3.DatabaseError as exc:
                error = exc
        raise InputError(f"store {self.path}: cannot be read as a harness store: {error}", source=self.path,
                         field="--store")

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ------------------------------------------------------------------ writing
    def add(self, record: dict) -> None:
        """Insert one result record and commit it."""
        record = _clean(record)
        self._db.execute(
            "INSERT OR REPLACE INTO results (run_id, session_id, run_key, schema_version, scenario, workload, backend,"
            " device, status, metric, median, started_at, record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                record["run_id"], record["session_id"], record.get("run_key"), record["schema_version"],
                record.get("scenario"), record.get("workload"), record.get("backend"), record.get("device"),
                record.get("status"), record.get("metric"), record.get("median"), record.get("started_at"),
                json.dumps(record, default=str),
            ),
        )

    def begin_session(self, session_id: str, plan: list[dict], *, scenario_path: str | None, command: str) -> None:
        """Record a session and its plan (so --resume knows what it was meant to run)."""
        self._db.execute(
            "INSERT OR IGNORE INTO sessions (session_id, started_at, state, scenario_path, command, plan)"
            " VALUES (?,?,?,?,?,?)",
            (session_id, utc_now(), "running", scenario_path, command, json.dumps(plan)),
        )

    def end_session(self, session_id: str, state: str) -> None:
        self._db.execute(
            "UPDATE sessions SET finished_at=?, state=? WHERE session_id=?", (utc_now(), state, session_id)
        )

    # ------------------------------------------------------------------ reading
    def records(self, session_ids: list[str] | None = None) -> list[dict]:
        """Every stored record (of the given sessions), oldest first."""
        query = "SELECT record FROM results"
        args: tuple = ()
        if session_ids:
            query += f" WHERE session_id IN ({','.join('?' * len(session_ids))})"
            args = tuple(session_ids)
        query += " ORDER BY started_at, rowid"
        return [json.loads(row[0]) for row in self._db.execute(query, args)]

    def session(self, session_id: str) -> dict | None:
        """A stored session with its plan, or None. A unique prefix of the id is enough."""
        rows = self._db.execute(
            "SELECT session_id, started_at, finished_at, state, scenario_path, command, plan FROM sessions"
            " WHERE session_id LIKE ?", (session_id + "%",)
        ).fetchall()
        if len(rows) != 1:
            return None
        keys = ("session_id", "started_at", "finished_at", "state", "scenario_path", "command", "plan")
        out = dict(zip(keys, rows[0]))
        out["plan"] = json.loads(out["plan"])
        return out

    def sessions(self) -> list[dict]:
        """Every session, newest last, with its counts of results by status."""
        rows = self._db.execute(
            "SELECT s.session_id, s.started_at, s.state, s.scenario_path, COUNT(r.run_id),"
            " SUM(r.status = 'ok') FROM sessions s LEFT JOIN results r ON r.session_id = s.session_id"
            " GROUP BY s.session_id ORDER BY s.started_at"
        ).fetchall()
        keys = ("session_id", "started_at", "state", "scenario_path", "results", "ok")
        return [dict(zip(keys, row)) for row in rows]

    def ok_run_keys(self, session_id: str) -> set[str]:
        """run_keys of a session that have an `ok` result."""
        rows = self._db.execute(
            "SELECT DISTINCT run_key FROM results WHERE session_id=? AND status='ok'", (session_id,)
        ).fetchall()
        return {r[0] for r in rows}


def records_frame(records: list[dict]):
    """A pandas DataFrame, one row per record, the public fields first."""
    import pandas as pd

    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        return pd.DataFrame(columns=list(FIELDS))
    ordered = [c for c in FIELDS if c in frame.columns] + [c for c in frame.columns if c not in FIELDS]
    return frame[ordered]


def load_results(store: str | os.PathLike | None = None, *, session: str | None = None):
    """Every result record in the store as a pandas DataFrame, one row per record."""
    path = str(store or default_store_path())
    if not Path(path).exists():
        raise InputError(f"store {path}: no such file", source=path, field="--store")
    with Store(path, readonly=True) as s:
        return records_frame(s.records([session] if session else None))
