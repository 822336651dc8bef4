"""Reading what a store file still holds, damaged or not: every row that can be read, from both ends.

A damaged page stops a scan where it lies; reading forwards and then backwards by rowid still gives
the rows on either side of it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from harness.errors import InputError
from harness.results.store.schema import SESSION_KEYS


def _scan(db: sqlite3.Connection, query: str) -> dict:
    """rowid -> row for every row a query reads, forwards then backwards, stopping at damage."""
    rows: dict = {}
    for order in ("ASC", "DESC"):
        try:
            for row in db.execute(f"{query} ORDER BY rowid {order}"):
                rows.setdefault(row[0], row[1:])
        except sqlite3.DatabaseError:
            pass
    return rows


def _connect(p: Path) -> sqlite3.Connection:
    """A read-only connection that can at least read the table list (InputError where none can)."""
    uri = p.resolve().as_uri()
    for query in ("?mode=ro", "?mode=ro&immutable=1"):
        try:
            db = sqlite3.connect(uri + query, uri=True, isolation_level=None)
            db.execute("SELECT name FROM sqlite_master").fetchall()
            return db
        except sqlite3.DatabaseError:
            pass
    raise InputError(f"{p}: an SQLite file so damaged that not even its table list can be read; nothing taken in",
                     source=str(p), field="--import")


def _sessions(db: sqlite3.Connection) -> list[dict]:
    """Every readable session row with an id; its JSON columns decoded (None where unreadable), plan a list."""
    try:
        have = [r[1] for r in db.execute("PRAGMA table_info(sessions)")]
    except sqlite3.DatabaseError:
        have = []
    columns = [c for c in SESSION_KEYS if c in have]
    if "session_id" not in columns:
        return []
    sessions = []
    for row in _scan(db, f"SELECT rowid, {', '.join(columns)} FROM sessions").values():
        s = dict(zip(columns, row))
        for key in ("plan", "settings", "owner"):
            try:
                s[key] = json.loads(s[key]) if s.get(key) else None
            except (ValueError, TypeError):
                s[key] = None
        if isinstance(s.get("session_id"), str) and s["session_id"]:
            s["plan"] = s.get("plan") if isinstance(s.get("plan"), list) else []
            sessions.append(s)
    return sessions


def salvage(p: Path) -> tuple[list, list[dict]]:
    """(the `record` column of every readable results row, as stored; every readable session) of an SQLite file."""
    db = _connect(p)
    try:
        texts = [row[0] for row in _scan(db, "SELECT rowid, record FROM results").values()]
        return texts, _sessions(db)
    finally:
        db.close()
