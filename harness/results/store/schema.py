"""The store's SQLite layout: its tables, and how a result record and a session become rows.

The layout is what stores written by every earlier version share: columns are only ever added
(`SESSION_ADDED`, added to an older store when it is opened), never renamed or dropped.
"""

from __future__ import annotations

import json
import math

from harness.results.record import Result, utc_now
from harness.results.sessions import SessionRow

#: The first bytes of every SQLite file.
SQLITE_HEADER = b"SQLite format 3\x00"

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS results (
    run_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    run_key TEXT,
    schema_version INTEGER NOT NULL,
    scenario TEXT, workload TEXT, backend TEXT, device TEXT, status TEXT,
    metric TEXT, median REAL, started_at TEXT,
    record TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS results_session ON results(session_id)",
    """CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    state TEXT NOT NULL,
    scenario_path TEXT,
    command TEXT,
    plan TEXT NOT NULL,
    settings TEXT,
    owner TEXT
)""",
)
#: Columns added to `sessions` since the first stores; added to an older store when it is opened.
SESSION_ADDED = ("settings", "owner")
SESSION_KEYS = ("session_id", "started_at", "finished_at", "state", "scenario_path", "command", "plan",
                "settings", "owner")

#: The columns of a results row, in the order `result_row` gives their values (`record`, the JSON, last).
RESULT_COLUMNS = ("run_id", "session_id", "run_key", "schema_version", "scenario", "workload", "backend", "device",
                  "status", "metric", "median", "started_at", "record")


def clean(value):
    """A value JSON can hold: a figure that is not finite was not measured, so it becomes null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def stored_record(result: Result) -> dict:
    """The flat row a result is stored as (and kept in a side file as): its to_dict(), not-finite figures null."""
    return clean(result.to_dict())


#: The columns every stored record has (the rest of the indexed columns may be absent from an old record: null).
REQUIRED_COLUMNS = ("run_id", "session_id", "schema_version")


def result_row(record: dict) -> tuple:
    """The values of a results row for a stored record, in RESULT_COLUMNS' order: the indexed columns, then the
    record as JSON. KeyError for a record without one of REQUIRED_COLUMNS."""
    indexed = RESULT_COLUMNS[:-1]
    return (*(record[c] if c in REQUIRED_COLUMNS else record.get(c) for c in indexed), json.dumps(record, default=str))


def imported_session_row(s: SessionRow, command: str | None) -> tuple:
    """The sessions-table values of a session taken in from a side file or another store, in column order
    (session_id, started_at, finished_at, state, scenario_path, command, plan, settings, owner); one left
    `running` by the process that wrote it is `interrupted` here."""
    state = "interrupted" if s.state == "running" else s.state or "interrupted"
    return (s.session_id, s.started_at or utc_now(), s.finished_at, state, s.scenario_path, command,
            json.dumps(s.plan, default=str), json.dumps(s.settings or {}, default=str),
            json.dumps(s.owner) if s.owner else None)


def session_doc(session: dict) -> dict:
    """A session as a side file keeps it: every session column, in the store's order."""
    return {k: session.get(k) for k in SESSION_KEYS}


#: The same tables in a PostgreSQL database: `seq` orders rows inserted at the same time (SQLite's rowid),
#: `heartbeat` is the server's time when the session's submitter last said it was alive (a session on
#: another host is abandoned when it stops, not when a local process check says so).
POSTGRES_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS results (
    seq BIGSERIAL,
    run_id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    run_key TEXT,
    schema_version INTEGER NOT NULL,
    scenario TEXT, workload TEXT, backend TEXT, device TEXT, status TEXT,
    metric TEXT, median DOUBLE PRECISION, started_at TEXT,
    record TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS results_session ON results(session_id)",
    "CREATE INDEX IF NOT EXISTS results_run_key ON results(run_key)",
    """CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    state TEXT NOT NULL,
    scenario_path TEXT,
    command TEXT,
    plan TEXT NOT NULL,
    settings TEXT,
    owner TEXT,
    heartbeat TIMESTAMPTZ
)""",
)

