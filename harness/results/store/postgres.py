"""A results store in a PostgreSQL database (`--store postgresql://USER@HOST:PORT/DB`), through psycopg 3.

The same tables (schema.POSTGRES_SCHEMA) and the same behaviour as the SQLite store: one row per result,
committed as it arrives; sessions with their plan, settings and owner; imports; the same queries
(`StoreQueries`). What differs, and why:

- Several hosts write one database at once; the submitting `harness run` writes (the jobs only write
  JSON result files), so one connection per session does the writing, and the database server, not a
  shared file system, keeps the writers apart.
- A session's owner may run on another host, where no local process check can reach it: the owner
  writes a heartbeat (the server's clock) every HEARTBEAT_S; a `running` session whose heartbeat is
  older than STALE_S is `abandoned` when the store is opened for writing (on the owner's own host, a
  process that has ended is seen at once, as with SQLite).
- Credentials never leave the URL they came in: the store is named without its password (`path`),
  and every message that quotes a server error has the password taken out. Give the password in the
  URL, in PGPASSWORD or in ~/.pgpass (then a resume hint, which names the store without it, works as
  printed).
- A result the server cannot take (it went away, the disk is full) is kept, with every other result of
  the process, in a side file in the working folder, as with SQLite.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

try:  # an optional dependency (the `cluster` extra): SQLite stores need none of it
    import psycopg
    from psycopg import conninfo
except ImportError:  # pragma: no cover - the test environments install it
    psycopg = None

from harness.errors import StoreError, StoreWriteError
from harness.results.record import Result, utc_now
from harness.results.store.imports import read_rows
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.queries import StoreQueries
from harness.results.store.schema import (
    POSTGRES_SCHEMA,
    SESSION_KEYS,
    clean,
    imported_session_row,
    result_row,
    stored_record,
    upsert_result,
)
from harness.results.store.sidefiles import Unsaved

#: How a store given by URL starts.
SCHEMES = ("postgresql://", "postgres://")
#: Seconds between two heartbeats of a running session.
HEARTBEAT_S = 30.0
#: A running session whose heartbeat is older than this is abandoned.
STALE_S = 120.0
#: Seconds a connection attempt may take.
CONNECT_TIMEOUT_S = 10
#: The advisory lock that lets one writer at a time create the tables.
_SCHEMA_LOCK = 0x4A52_5354

_URL_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*):[^@\s]*@")
_QUERY_PASSWORD = re.compile(r"([?&])password=[^&\s]*&?")


def is_server_url(target: str | None) -> bool:
    """Whether a --store value names a database server (postgresql://...) rather than an SQLite file."""
    return bool(target) and str(target).startswith(SCHEMES)


def redact(text: str) -> str:
    """Text with the password of every postgresql:// URL in it taken out (a command line, a message)."""
    text = _URL_PASSWORD.sub(r"\1@", str(text))
    return _QUERY_PASSWORD.sub(lambda m: m.group(1) if m.group(0).endswith("&") else "", text)


def _scrub(message: str, password: str | None) -> str:
    """A server's message, first line only, without the password."""
    line = (str(message).strip().splitlines() or ["unknown error"])[0]
    line = redact(line)
    return line.replace(password, "***") if password else line


def _connect(url: str, display: str, password: str | None) -> psycopg.Connection:
    """An autocommit connection (StoreError, one line without the password, if the server refuses it)."""
    try:
        return psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S, application_name="harness")
    except psycopg.Error as exc:
        raise StoreError(f"store {display}: cannot connect: {_scrub(exc, password)}", source=display,
                         field="--store") from None


class _Heartbeat(threading.Thread):
    """Writes `heartbeat = now()` for the sessions this process runs, every HEARTBEAT_S, on its own connection."""

    def __init__(self, url: str):
        super().__init__(name="harness-heartbeat", daemon=True)
        self.url = url
        self.sessions: set[str] = set()
        self._stop = threading.Event()

    def run(self) -> None:
        db = None
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if db is None:
                    db = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
                for session_id in list(self.sessions):
                    db.execute("UPDATE sessions SET heartbeat = now() WHERE session_id = %s AND state = 'running'",
                               (session_id,))
            except psycopg.Error:  # the server went away: try again next beat; the session's own writes say more
                db = None
        if db is not None:
            db.close()

    def stop(self) -> None:
        """End the thread (it exits within one beat; a daemon, so it never holds the process)."""
        self._stop.set()


class PostgresStore(StoreQueries):
    """A results store in a PostgreSQL database. Opening it connects and checks it (StoreError, exit 2, for a bad
    URL, a refused connection or a database that is not a harness store), and creates the tables if there are none,
    unless it is opened `readonly`."""

    ORDER = "seq"

    def reopen(self, *, readonly: bool = True) -> "PostgresStore":
        """The same database through a new connection (the URL with its password: `path` has none)."""
        return PostgresStore(self._url, readonly=readonly)

    def __init__(self, url: str, *, readonly: bool = False):
        self.readonly = readonly
        if psycopg is None:
            raise StoreError(f"store {redact(url)}: a PostgreSQL store needs psycopg 3: pip install 'harness[cluster]'",
                             source=redact(url), field="--store")
        try:
            params = conninfo.conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise StoreError(f"store {redact(url)}: not a valid PostgreSQL URL: {_scrub(exc, None)}",
                             source=redact(url), field="--store") from None
        self._password = params.get("password")
        #: what the store is called in every message: the URL without its password
        self.path = redact(url)
        self._url = url
        self._unsaved = Unsaved(str(Path.cwd() / self._local_name(params)))
        self._columns = SESSION_KEYS
        #: sessions found `running` whose owner is gone, marked `abandoned` when opened
        self.abandoned: list[str] = []
        self._db = _connect(url, self.path, self._password)
        self._heartbeat: _Heartbeat | None = None
        try:
            if readonly:
                self._db.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
                self._check_readable()
            else:
                self._create_tables()
                self._mark_abandoned()
        except BaseException:
            self._db.close()
            raise

    @staticmethod
    def _local_name(params: dict) -> str:
        """The name side files of this database take in the working folder."""
        parts = [params.get("host") or "local", params.get("port") or "5432", params.get("dbname") or "db"]
        return "postgresql-" + "-".join(re.sub(r"[^A-Za-z0-9._]", "_", str(p)) for p in parts)

    @property
    def side_file(self) -> str | None:
        """The side file this process wrote when the store could not take a result, or None."""
        return self._unsaved.path

    def _failed(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"store {self.path}: {what}: {_scrub(exc, self._password)}", source=self.path,
                          field="--store")

    # ------------------------------------------------------------------ opening
    def _check_readable(self) -> None:
        try:
            found = self._db.execute("SELECT to_regclass('results') IS NOT NULL").fetchone()[0]
        except psycopg.Error as exc:
            raise self._failed("cannot be read as a harness store", exc) from None
        if not found:
            raise StoreError(f"store {self.path}: cannot be read as a harness store: it has no results table",
                             source=self.path, field="--store")

    def _create_tables(self) -> None:
        """The tables, created by one writer at a time (the others wait on an advisory lock, then find them)."""
        try:
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in POSTGRES_SCHEMA:
                    self._db.execute(statement)
        except psycopg.Error as exc:
            raise self._failed("cannot be opened for writing", exc) from None

    def _mark_abandoned(self) -> None:
        """Sessions left `running` by an owner that has ended (this host) or stopped its heartbeat (any host)."""
        try:
            rows = self._db.execute(
                "SELECT session_id, owner, heartbeat < now() - make_interval(secs => %s) FROM sessions"
                " WHERE state = 'running'", (STALE_S,)).fetchall()
            for session_id, owner, stale in rows:
                try:
                    alive = owner_alive(json.loads(owner)) if owner else None
                except ValueError:
                    alive = None
                if alive is False or (alive is None and stale):
                    self._db.execute("UPDATE sessions SET state = 'abandoned', finished_at = %s"
                                     " WHERE session_id = %s AND state = 'running'", (utc_now(), session_id))
                    self.abandoned.append(session_id)
        except psycopg.Error:
            pass  # marking is housekeeping; a store that cannot take it fails on its first real write

    def close(self) -> None:
        """Stop the heartbeat and close the connection (every result is committed already)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        self._db.close()

    def _read(self, query: str, args: tuple = ()) -> list:
        try:
            return self._db.execute(query.replace("?", "%s"), args).fetchall()
        except psycopg.Error as exc:
            raise self._failed("cannot be read", exc) from None

    # ------------------------------------------------------------------ writing
    def add(self, result: Result) -> None:
        """Insert one result record (committed at once). StoreWriteError if the server cannot take it; then it is
        kept in a side file in the working folder with every other record this process added."""
        record = stored_record(result)
        self._unsaved.records.append(record)
        try:
            self._db.execute(upsert_result("REPLACE"), result_row(record))
        except psycopg.Error as exc:
            kept = self._unsaved.keep(ConnectionError(_scrub(exc, self._password)))
            message = str(kept).replace(self._unsaved.store_path, self.path, 1)
            raise StoreWriteError(message, source=self.path, kept_in=kept.kept_in) from None

    def _beat(self, session_id: str) -> None:
        """Keep the session's heartbeat going while this process runs it."""
        if self._heartbeat is None:
            self._heartbeat = _Heartbeat(self._url)
            self._heartbeat.start()
        self._heartbeat.sessions.add(session_id)

    def begin_session(self, session_id: str, plan: list[dict], *, scenario_path: str | None, command: str,
                      settings: dict | None = None) -> None:
        """Record a session, its plan and the settings that shape its runs (the command without any password)."""
        command = redact(command) if command else command
        row = {"session_id": session_id, "started_at": utc_now(), "finished_at": None, "state": "running",
               "scenario_path": scenario_path, "command": command, "plan": plan, "settings": settings or {},
               "owner": process_owner()}
        self._unsaved.sessions[session_id] = row
        try:
            self._db.execute(
                "INSERT INTO sessions (session_id, started_at, state, scenario_path, command, plan, settings, owner,"
                " heartbeat) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,now()) ON CONFLICT (session_id) DO NOTHING",
                (session_id, row["started_at"], "running", scenario_path, command, json.dumps(plan, default=str),
                 json.dumps(row["settings"], default=str), json.dumps(row["owner"])))
        except psycopg.Error as exc:
            raise self._failed("cannot record the session, nothing was run", exc) from None
        self._beat(session_id)

    def reopen_session(self, session_id: str) -> None:
        """A resumed session runs again: `running`, owned by this process, its heartbeat going. Refused (StoreError)
        while another submitter, on any host, still runs it (its heartbeat is fresh): in one statement, so two
        submitters resuming it at once cannot both take it."""
        owner = process_owner()
        try:
            taken = self._db.execute(
                "UPDATE sessions SET state = 'running', finished_at = NULL, owner = %s, heartbeat = now()"
                " WHERE session_id = %s AND NOT (state = 'running' AND heartbeat > now() - make_interval(secs => %s))"
                " RETURNING session_id", (json.dumps(owner), session_id, STALE_S)).fetchall()
            holder = None if taken else self._db.execute(
                "SELECT owner, extract(epoch FROM now() - heartbeat) FROM sessions WHERE session_id = %s",
                (session_id,)).fetchone()
        except psycopg.Error as exc:
            raise self._failed(f"cannot resume session {session_id}, nothing was run", exc) from None
        if holder is not None:
            host = (json.loads(holder[0]) if holder[0] else {}).get("host") or "another host"
            raise StoreError(f"store {self.path}: session {session_id} is still running on {host} (its heartbeat is "
                             f"{float(holder[1]):.0f} s old); resuming it now would run its runs twice. Wait for it, "
                             f"or stop it first", source=self.path, field="--resume")
        if session_id in self._unsaved.sessions:
            self._unsaved.sessions[session_id].update(state="running", finished_at=None, owner=owner)
        self._beat(session_id)

    def end_session(self, session_id: str, state: str) -> None:
        """Mark a session finished, interrupted or failed (StoreError if the server cannot take it)."""
        if self._heartbeat is not None:
            self._heartbeat.sessions.discard(session_id)
        if session_id in self._unsaved.sessions:
            self._unsaved.sessions[session_id].update(state=state, finished_at=utc_now())
        try:
            self._db.execute("UPDATE sessions SET finished_at = %s, state = %s WHERE session_id = %s",
                             (utc_now(), state, session_id))
        except psycopg.Error as exc:
            raise self._failed(f"cannot mark session {session_id} {state}", exc) from None

    # ------------------------------------------------------------------ imports
    def import_file(self, path) -> dict:
        """Take in a side file, a JSON array of records or a store (as Store.import_file), in one transaction."""
        records, sessions, unreadable = read_rows(path)
        try:
            with self._db.transaction():
                new = sum(self._db.execute(upsert_result("IGNORE"), result_row(clean(r))).rowcount for r in records)
                new_sessions = sum(self._insert_session(s) for s in sessions)
        except psycopg.Error as exc:
            raise self._failed(f"cannot take in {path}, nothing was taken in", exc) from None
        return {"records": len(records), "new": new, "sessions": len(sessions), "new_sessions": new_sessions,
                "unreadable": unreadable}

    def _insert_session(self, s: dict) -> int:
        """Insert an imported session unless its id is stored already (1 if it was new); one left `running`
        by the process that wrote it is `interrupted` here."""
        cursor = self._db.execute(
            "INSERT INTO sessions (session_id, started_at, finished_at, state, scenario_path, command, plan,"
            " settings, owner) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (session_id) DO NOTHING",
            imported_session_row(s, redact(s["command"]) if s.get("command") else None))
        return cursor.rowcount
