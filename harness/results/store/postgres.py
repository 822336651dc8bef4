"""A results store in a PostgreSQL database (`--store postgresql://USER@HOST:PORT/DB`), through psycopg 3.

The same tables (schema.POSTGRES_SCHEMA) and the same behaviour as the SQLite store, through the same code
(`sqlstore.SQLStore`: one row per result, committed as it arrives; sessions with their plan, settings and
owner; imports; the same queries). What differs, and why, is here:

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
- A database that holds other tables and no harness store is refused (exit 2), as an SQLite file that is
  not a harness store is, unless HARNESS_STORE_INIT=1 says to create harness's tables beside them.
- A result the server cannot take (it went away, the disk is full) is kept, with every other result of
  the process, in a side file in the working folder, as with SQLite.
"""

from __future__ import annotations

import functools
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
from harness.machine.variables import variables
from harness.results.sessions import SessionOwner
from harness.results.store.location import StoreLocation, redact_urls
from harness.results.store.schema import POSTGRES_SCHEMA
from harness.results.store.sqlstore import SQLStore

#: Seconds between two heartbeats of a running session.
HEARTBEAT_S = 30.0
#: A running session whose heartbeat is older than this is abandoned.
STALE_S = 120.0
#: Seconds a connection attempt may take.
CONNECT_TIMEOUT_S = 10
#: Set to 1, harness creates its tables in a database that already holds other tables (else it refuses it, as
#: the SQLite store refuses an SQLite file that is not a harness store).
STORE_INIT_VARIABLE = "HARNESS_STORE_INIT"
#: The advisory lock that lets one writer at a time create the tables.
_SCHEMA_LOCK = 0x4A52_5354
_SCHEME_PATTERN = r"postgres(?:ql)?"


def redact(text: str) -> str:
    """Text with the password of every postgresql:// URL in it taken out (a command line, a message)."""
    return redact_urls(text, _SCHEME_PATTERN)


def _scrub(message, location: StoreLocation) -> str:
    """A server's or libpq's message, first line only, without the location's password in any spelling."""
    line = (str(message).strip().splitlines() or ["unknown error"])[0]
    return location.scrub(redact(line))


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


class PostgresStore(SQLStore):
    """A results store in a PostgreSQL database. Opening it connects and checks it (StoreError, exit 2, for a bad
    URL, a refused connection or a database that is not a harness store), and creates the tables if there are none,
    unless it is opened `readonly`."""

    ORDER = "seq"
    errors = (psycopg.Error,) if psycopg is not None else ()
    _BEGUN_EXTRA = {"heartbeat": "now()"}
    _ROW_LOCK = " FOR UPDATE"

    @classmethod
    def exists(cls, location: StoreLocation | str) -> bool:
        """Always: connecting says whether the database holds a store."""
        return True

    def __init__(self, location: StoreLocation | str, *, readonly: bool = False):
        self._heartbeat: _Heartbeat | None = None
        super().__init__(location, readonly=readonly)

    # ------------------------------------------------------------------ opening
    @functools.cached_property
    def _settings(self) -> dict:
        """The URL's connection settings (StoreError where psycopg is missing or the URL is not valid)."""
        if psycopg is None:
            raise StoreError(f"store {self.path}: a PostgreSQL store needs psycopg 3: pip install 'harness[cluster]'",
                             source=self.path, field="--store")
        try:
            return conninfo.conninfo_to_dict(self.location.target)
        except psycopg.Error as exc:
            raise StoreError(f"store {self.path}: not a valid PostgreSQL URL: {_scrub(exc, self.location)}",
                             source=self.path, field="--store") from None

    def _side_file_base(self) -> str:
        """Side files of a database go to the working folder, named after its host, port and database."""
        params = self._settings
        parts = [params.get("host") or "local", params.get("port") or "5432", params.get("dbname") or "db"]
        return str(Path.cwd() / ("postgresql-" + "-".join(re.sub(r"[^A-Za-z0-9._]", "_", str(p)) for p in parts)))

    def _connect(self) -> psycopg.Connection:
        """An autocommit connection (StoreError, one line without the password, if the server refuses it)."""
        try:
            return psycopg.connect(self.location.target, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S,
                                   application_name="harness")
        except psycopg.Error as exc:
            raise self._failed("cannot connect", exc) from None

    def _opened(self) -> None:
        if self.readonly:
            self._db.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            self._check_readable()
        else:
            self._create_tables()

    def _check_readable(self) -> None:
        try:
            found = self._db.execute("SELECT to_regclass('results') IS NOT NULL").fetchone()[0]
        except psycopg.Error as exc:
            raise self._failed("cannot be read as a harness store", exc) from None
        if not found:
            raise StoreError(f"store {self.path}: cannot be read as a harness store: it has no results table",
                             source=self.path, field="--store")

    def _create_tables(self) -> None:
        """The tables, created by one writer at a time (the others wait on an advisory lock, then find them); refused
        (StoreError) in a database that holds other tables and no harness store, unless STORE_INIT_VARIABLE is 1."""
        try:
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                others = [row[0] for row in self._db.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY tablename")]
                if others and "results" not in others and not variables().store_init:
                    shown = ", ".join(others[:8]) + (f" and {len(others) - 8} more" if len(others) > 8 else "")
                    raise StoreError(
                        f"store {self.path}: cannot be opened for writing: the database holds other tables ({shown}) "
                        f"and no harness store; give a database of its own, or set {STORE_INIT_VARIABLE}=1 to create "
                        "harness's tables beside them", source=self.path, field="--store")
                for statement in POSTGRES_SCHEMA:
                    self._db.execute(statement)
        except psycopg.Error as exc:
            raise self._failed("cannot be opened for writing", exc) from None

    def close(self) -> None:
        """Stop the heartbeat and close the connection (every result is committed already)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        super().close()

    # ------------------------------------------------------------------ the dialect
    def _execute(self, sql: str, args: tuple = ()):
        return self._db.execute(sql.replace("?", "%s"), args)

    def _insert(self, table: str, columns: tuple[str, ...], conflict: str, extra: dict[str, str] | None = None) -> str:
        extra = extra or {}
        key = columns[0]
        head = (f"INSERT INTO {table} ({', '.join((*columns, *extra))}) "
                f"VALUES ({', '.join(['?'] * len(columns) + list(extra.values()))}) ON CONFLICT ({key}) DO ")
        if conflict == "ignore":
            return head + "NOTHING"
        return head + "UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in (*columns[1:], *extra))

    def _transaction(self):
        return self._db.transaction()

    def _explain(self, exc: BaseException) -> str:
        return _scrub(exc, self.location)

    def _kept(self, exc: BaseException) -> StoreWriteError:
        """Kept as SQLite's are, the error naming the store without its password (its side file is local)."""
        kept = self._unsaved.keep(ConnectionError(self._explain(exc)))
        message = str(kept).replace(self._unsaved.store_path, self.path, 1)
        return StoreWriteError(message, source=self.path, kept_in=kept.kept_in)

    def _stored_command(self, command: str | None) -> str | None:
        return redact(command) if command else command

    # ------------------------------------------------------------------ sessions on many hosts
    def _running_sessions(self) -> list[tuple[str, str | None, bool]]:
        return self._execute("SELECT session_id, owner, heartbeat < now() - make_interval(secs => ?) FROM sessions"
                             " WHERE state = 'running'", (STALE_S,)).fetchall()

    def _take_session(self, session_id: str, owner: str) -> None:
        """Taken back in one statement, so two submitters resuming it at once cannot both take it; refused
        (StoreError) while another submitter, on any host, still runs it (its heartbeat is fresh)."""
        taken = self._execute(
            "UPDATE sessions SET state = 'running', finished_at = NULL, owner = ?, heartbeat = now()"
            " WHERE session_id = ? AND NOT (state = 'running' AND heartbeat > now() - make_interval(secs => ?))"
            " RETURNING session_id", (owner, session_id, STALE_S)).fetchall()
        if taken:
            return
        holder = self._execute("SELECT owner, extract(epoch FROM now() - heartbeat) FROM sessions WHERE session_id = ?",
                               (session_id,)).fetchone()
        if holder is None:
            return
        host = SessionOwner.of(json.loads(holder[0]) if holder[0] else None).host or "another host"
        raise StoreError(f"store {self.path}: session {session_id} is still running on {host} (its heartbeat is "
                         f"{float(holder[1]):.0f} s old); resuming it now would run its runs twice. Wait for it, "
                         f"or stop it first", source=self.path, field="--resume")

    def _running(self, session_id: str) -> None:
        """Keep the session's heartbeat going while this process runs it."""
        if self._heartbeat is None:
            self._heartbeat = _Heartbeat(self.location.target)
            self._heartbeat.start()
        self._heartbeat.sessions.add(session_id)

    def _ended(self, session_id: str) -> None:
        if self._heartbeat is not None:
            self._heartbeat.sessions.discard(session_id)
