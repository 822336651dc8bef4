"""What every SQL results store answers alike, whatever holds it (an SQLite file, a PostgreSQL database).

`StoreQueries` is the reading half of `sqlstore.SQLStore`: its records and sessions, in SQL both databases
take (`?` placeholders; a store whose driver wants others turns them into its own), and closing it. The
attributes it reads are declared here and set when the store is opened (`SQLStore.__init__`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import InputError, StoreError
from harness.results.record import RecordError, Result
from harness.results.sessions import SessionSummary, StoredSession
from harness.results.store.location import StoreLocation
from harness.results.store.sidefiles import Unsaved, side_files


class StoreQueries:
    """The queries of a results store, shared by its SQLite and PostgreSQL forms."""

    #: the column that orders rows of the same started_at in insertion order
    ORDER = "rowid"
    #: where the store is, as given and parsed
    location: StoreLocation
    #: what every message and hint calls the store: a file's path, a URL without its password
    path: str
    #: the session columns this store has (an older SQLite store opened read-only may lack some)
    _columns: tuple[str, ...]
    #: every record this process added and every session it ran or read, for a side file if the store fails
    _unsaved: Unsaved

    #: the connection to the database
    _db: Any

    def _read(self, query: str, args: tuple = ()) -> list:
        """Every row of a query (`?` placeholders); StoreError, one line, where the store cannot be read."""
        raise NotImplementedError

    @property
    def side_file(self) -> str | None:
        """The side file this process wrote when the store could not take a result, or None."""
        return self._unsaved.path

    @property
    def side_file_base(self) -> str:
        """The path this store's side files and its sessions' journals are named after (`<it>.unsaved-...json`)."""
        return self._unsaved.store_path

    def close(self) -> None:
        """Close the connection (every result is committed already)."""
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def side_files(self) -> list[Path]:
        """Side files beside this store, left by a process that could not store its results."""
        return side_files(self._unsaved.store_path)

    def results(self, session_ids: list[str] | None = None) -> list[Result]:
        """Every stored record (of the given sessions), oldest first, typed (StoreError for a row that is none)."""
        try:
            return [Result.from_dict(row) for row in self.records(session_ids)]
        except RecordError as exc:
            raise StoreError(f"store {self.path}: {exc}", source=self.path, field="--store") from None

    def records(self, session_ids: list[str] | None = None) -> list[dict]:
        """Every stored record (of the given sessions), oldest first, as the flat rows exports and pandas take."""
        query = "SELECT record FROM results"
        args: tuple = ()
        if session_ids:
            query += f" WHERE session_id IN ({','.join('?' * len(session_ids))})"
            args = tuple(session_ids)
        query += f" ORDER BY started_at, {self.ORDER}"
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
            ids = [r[0] for r in self._read("SELECT DISTINCT session_id FROM results")]
            matches = sorted(i for i in ids if str(i).startswith(prefix))
        if len(matches) != 1:
            known = ", ".join(f"{s.session_id} ({s.started_at or '?'}, {s.state or '?'})"
                              for s in self.sessions()) or "none"
            raise InputError(f"store {self.path}: no single session matches {prefix!r} (sessions: {known}); "
                             f"harness results --sessions lists them", source=self.path, field="--session")
        return matches[0]

    def session(self, session_id: str) -> StoredSession | None:
        """A stored session with its plan and settings, or None. A unique prefix of the id is enough."""
        matches = self.find_sessions(session_id)
        if len(matches) != 1:
            return None
        rows = self._read(f"SELECT {', '.join(self._columns)} FROM sessions WHERE session_id = ?", (matches[0],))
        row = dict(zip(self._columns, rows[0]))  # a database row: its JSON columns decoded, empty where unreadable
        for key, empty in (("plan", []), ("settings", {}), ("owner", None)):
            try:
                row[key] = json.loads(row[key]) if key in row and row[key] else empty
            except ValueError:
                row[key] = empty
        self._unsaved.sessions.setdefault(row["session_id"], dict(row))
        try:
            return StoredSession.from_dict(row)
        except ValueError as exc:  # a plan or settings of the wrong type: no session this version can resume
            raise StoreError(f"store {self.path}: session {row['session_id']} cannot be read: {exc}",
                             source=self.path, field="--store") from None

    def sessions(self) -> list[SessionSummary]:
        """Every session, newest last, with its counts of results by status."""
        rows = self._read(
            "SELECT s.session_id, s.started_at, s.state, s.scenario_path, COUNT(r.run_id),"
            " SUM(CASE WHEN r.status = 'ok' THEN 1 ELSE 0 END) FROM sessions s LEFT JOIN results r ON r.session_id = s.session_id"
            " GROUP BY s.session_id ORDER BY s.started_at"
        )
        return [SessionSummary(session_id, started_at, state, scenario_path, int(results or 0), int(ok or 0))
                for session_id, started_at, state, scenario_path, results, ok in rows]

    def ok_run_keys(self, session_id: str) -> set[str]:
        """run_keys of a session that have an `ok` result."""
        rows = self._read("SELECT DISTINCT run_key FROM results WHERE session_id=? AND status='ok'", (session_id,))
        return {r[0] for r in rows}

    def ok_medians(self, run_key: str) -> list[float]:
        """The medians of every `ok` record of one configuration (any session), oldest first."""
        rows = self._read("SELECT median FROM results WHERE run_key=? AND status='ok' AND median IS NOT NULL"
                          f" ORDER BY started_at, {self.ORDER}", (run_key,))
        return [float(r[0]) for r in rows]

    def decided_results(self, session_id: str, status: str) -> list[tuple[str, int | None, str]]:
        """(run_key, replicate or None, error) of every result of a session with `status`: one per result."""
        out = []
        for run_key, text in self._read("SELECT run_key, record FROM results WHERE session_id=? AND status=?",
                                        (session_id, status)):
            try:
                record = json.loads(text)
            except ValueError:
                record = {}
            replicate = record.get("replicate") if isinstance(record, dict) else None
            error = record.get("error") if isinstance(record, dict) else None
            out.append((run_key, replicate if isinstance(replicate, int) and not isinstance(replicate, bool) else None,
                        error if isinstance(error, str) else ""))
        return out

    def ok_results(self, session_id: str) -> list[tuple[str, int | None]]:
        """(run_key, replicate or None) of every `ok` result of a session: one entry per result, so
        a configuration planned several times is counted as often as it finished."""
        return [(run_key, replicate) for run_key, replicate, _ in self.decided_results(session_id, "ok")]
