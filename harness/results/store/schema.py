"""The store's SQLite layout: its tables, and how a result record and a session become rows.

The layout is what stores written by every earlier version share: columns are only ever added
(`SESSION_ADDED`, added to an older store when it is opened), never renamed or dropped.
"""

from __future__ import annotations

import json
import math

from harness.results.record import Result, utc_now

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

#: The columns of a results row, in the order `result_row` gives their values.
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


def result_row(record: dict) -> tuple:
    """The values of a results row for a stored record: the indexed columns, then the record as JSON."""
    return (
        record["run_id"], record["session_id"], record.get("run_key"), record["schema_version"],
        record.get("scenario"), record.get("workload"), record.get("backend"), record.get("device"),
        record.get("status"), record.get("metric"), record.get("median"), record.get("started_at"),
        json.dumps(record, default=str),
    )


def imported_session_row(s: dict, command: str | None) -> tuple:
    """The sessions-table values of a session taken in from a side file or another store, in column order
    (session_id, started_at, finished_at, state, scenario_path, command, plan, settings, owner); one left
    `running` by the process that wrote it is `interrupted` here."""
    state = "interrupted" if s.get("state") == "running" else s.get("state") or "interrupted"
    return (s["session_id"], s.get("started_at") or utc_now(), s.get("finished_at"), state, s.get("scenario_path"),
            command, json.dumps(s.get("plan") or [], default=str), json.dumps(s.get("settings") or {}, default=str),
            json.dumps(s.get("owner")) if s.get("owner") else None)


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

