"""The results store: an embedded SQLite file, one row per result, committed as each arrives.

WAL journaling and a busy timeout let several `harness run` processes write one store at once;
every insert is its own transaction, so an interrupted session keeps what it measured.

Nothing measured is lost (docs/reliability.md):

- A store is checked when it is opened (`PRAGMA quick_check`): a damaged file, a file that is not
  a harness store, or an existing 0-byte file is refused before anything runs (StoreError: exit 2),
  and left exactly as it was. harness creates a new store in one step (built aside, then linked
  into place), so a file of 0 bytes is never one of its stores in the making: it is one whose
  contents were lost (truncated by a full disk or a failed copy) or one made by hand.
- A result that cannot be stored in mid-session (a full disk, a damaged page) is kept, with every
  other result this process measured and its session's plan, in a JSON side file beside the store
  (`<store>.unsaved-<session>-<time>-<pid>.json`; else in the working folder, the temporary folder
  or the home folder; else printed on standard error), and StoreWriteError names it.
  `harness results --import FILE` takes it back in, and the next `harness run` into that store
  takes in the side files beside it.
- A session whose process ended without closing it (kill -9, a power cut) is marked `abandoned`
  the next time the store is opened for writing: each session records its owner (host, boot,
  pid and the pid's start time), so a reused pid does not keep a dead session `running`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import sqlite3
import sys
import tempfile
import uuid
from pathlib import Path

from harness.errors import InputError, StoreError, StoreWriteError
from harness.results.record import FIELDS, Result, utc_now

DEFAULT_STORE = "harness.db"
BUSY_TIMEOUT_MS = 60_000
SQLITE_HEADER = b"SQLite format 3\x00"
#: The name of a side file: `<store file name>.unsaved-<session>-<time>-<pid>.json`.
SIDE_MARK = ".unsaved-"

_SCHEMA = (
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
_SESSION_ADDED = ("settings", "owner")
_SESSION_KEYS = ("session_id", "started_at", "finished_at", "state", "scenario_path", "command", "plan",
                 "settings", "owner")


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


def explain(exc: BaseException) -> str:
    """What an SQLite error means for the user, in words."""
    text = str(exc)
    low = text.lower()
    if "full" in low:
        return f"the disk is full ({text})"
    if "malformed" in low or "corrupt" in low:
        return f"the file is damaged ({text})"
    if "not a database" in low or "encrypted" in low:
        return f"it is not an SQLite database ({text})"
    if "readonly" in low or "read-only" in low or "unable to open" in low or "permission" in low:
        return f"it cannot be written here: permissions or a read-only folder ({text})"
    return text


def _damaged(path: str, detail: str) -> StoreError:
    return StoreError(
        f"store {path} is damaged ({detail}): harness does not write into a damaged store, and left it as it was. "
        f"Keep the file; take what it still holds into a new store with `harness results --import {path} --store NEW.db`, "
        "then use --store NEW.db (or move the file aside and start a new store)",
        source=path, field="--store",
    )


# --------------------------------------------------------------------------- session owners
def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, from /proc (None where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def process_owner(pid: int | None = None) -> dict:
    """Who runs a session: host, boot, pid and the pid's start time (so a reused pid is told apart)."""
    pid = os.getpid() if pid is None else pid
    stat = _proc_stat(pid)
    return {"host": platform.node(), "boot": _boot_id(), "pid": pid, "start": stat[1] if stat else None}


def owner_alive(owner: dict) -> bool | None:
    """Whether a session's process still runs: True, False, or None where this machine cannot tell."""
    if not isinstance(owner, dict) or owner.get("host") != platform.node():
        return None
    boot = _boot_id()
    if boot and owner.get("boot") and owner["boot"] != boot:
        return False  # the machine has restarted since
    pid = owner.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return None
    stat = _proc_stat(pid)
    if stat is not None:
        if stat[0] in ("Z", "X"):  # ended, not yet reaped
            return False
        if owner.get("start") is not None and stat[1] != owner["start"]:
            return False  # the pid was reused by another process
    return True


# --------------------------------------------------------------------------- the store
class Store:
    """A SQLite results store. Opening it checks it (StoreError if it is damaged, not a harness store,
    or cannot be written), unless it is opened `readonly`, which checks it can be read (reading
    results needs no write access: a store on a read-only mount, an archived artifact)."""

    def __init__(self, path: str | os.PathLike | None = None, *, readonly: bool = False):
        self.path = str(path or default_store_path())
        self.readonly = readonly
        #: every record this process added (written to the side file if the store fails)
        self._kept: list[dict] = []
        self._sessions_seen: dict[str, dict] = {}
        #: the side file of this process, once one was written
        self.side_file: str | None = None
        #: sessions found `running` with their process gone, marked `abandoned` when opened
        self.abandoned: list[str] = []
        parent = Path(self.path).resolve().parent
        if not parent.is_dir():
            raise StoreError(f"store {self.path}: folder {parent} does not exist", source=self.path, field="--store")
        if Path(self.path).is_dir():
            raise StoreError(f"store {self.path}: is a folder; expected a store file", source=self.path, field="--store")
        if readonly:
            self._db = self._open_readonly()
        else:
            self._db = self._open_writable()
        self._columns = self._session_columns()
        if not readonly:
            self._mark_abandoned()

    # ------------------------------------------------------------------ opening
    def _check(self, db: sqlite3.Connection, *, reading: bool) -> None:
        """quick_check, then: a harness store, or an SQLite file with no tables yet."""
        cannot = "cannot be read as a harness store" if reading else "cannot be opened for writing"
        try:
            rows = db.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc).lower() or "encrypted" in str(exc).lower():
                raise StoreError(f"store {self.path}: {cannot}: {explain(exc)}", source=self.path,
                                 field="--store") from None
            raise _damaged(self.path, str(exc)) from None
        verdict = [str(r[0]) for r in rows]
        if verdict != ["ok"]:
            lines = [line for line in "\n".join(verdict).splitlines() if line.strip() and not line.startswith("***")]
            more = f" (and {len(lines) - 1} more problems)" if len(lines) > 1 else ""
            raise _damaged(self.path, f"PRAGMA quick_check: {lines[0] if lines else 'not ok'}{more}")
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if reading and "results" not in tables:
            raise StoreError(f"store {self.path}: {cannot}: it has no results table", source=self.path, field="--store")
        if tables and "results" not in tables:
            raise StoreError(
                f"store {self.path}: {cannot}: it is an SQLite database but not a harness store "
                f"(tables: {', '.join(sorted(tables))}); give another --store", source=self.path, field="--store")

    def _precheck(self, *, reading: bool) -> None:
        """Check the file through a read-only connection. Where no write-ahead log holds anything,
        an immutable one, which creates no -wal or -shm file, so a store that is refused is left
        exactly as it was; else a plain read-only one, which reads the log too (after a full disk
        the log can hold what the main file does not yet)."""
        query = "?mode=ro" if _nonempty(self.path + "-wal") else "?mode=ro&immutable=1"
        try:
            db = sqlite3.connect(Path(self.path).resolve().as_uri() + query, uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            what = "cannot be read as a harness store" if reading else "cannot be opened for writing"
            raise StoreError(f"store {self.path}: {what}: {explain(exc)}", source=self.path, field="--store") from None
        try:
            self._check(db, reading=reading)
        finally:
            db.close()

    def _create(self) -> None:
        """A new store, built under a temporary name and linked into place in one step."""
        final = Path(self.path)
        tmp = final.with_name(f".{final.name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            db = sqlite3.connect(tmp, isolation_level=None)
            try:
                db.execute("PRAGMA journal_mode=WAL")
                for statement in _SCHEMA:
                    db.execute(statement)
            finally:
                db.close()  # checkpoints: everything is in the main file
            try:
                os.link(tmp, final)
            except FileExistsError:
                pass  # another process created it first: use that one
            except OSError:  # a file system without hard links
                if not final.exists():
                    os.replace(tmp, final)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"store {self.path}: cannot be created: {explain(exc)}", source=self.path,
                             field="--store") from None
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(f"{tmp}{suffix}")
                except OSError:
                    pass

    def _open_writable(self) -> sqlite3.Connection:
        p = Path(self.path)
        if not p.exists():
            self._create()
        elif p.stat().st_size == 0 and not _nonempty(self.path + "-wal"):
            raise StoreError(
                f"store {self.path}: the file is empty (0 bytes), so it is not a harness store: harness creates its "
                "stores whole, so an empty one lost its contents (a full disk, a failed copy) or was made by hand. "
                "It was left as it was; delete it to start a new store at this path, or give another --store",
                source=self.path, field="--store")
        self._precheck(reading=False)
        try:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot be opened for writing: {explain(exc)}", source=self.path,
                             field="--store") from None
        try:
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            # the schema, and proof that it is writable now, not after the first hour of measuring
            db.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA:
                db.execute(statement)
            have = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
            for column in _SESSION_ADDED:
                if column not in have:
                    db.execute(f"ALTER TABLE sessions ADD COLUMN {column} TEXT")
            db.execute("COMMIT")
        except StoreError:
            db.close()
            raise
        except sqlite3.Error as exc:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            db.close()
            if "malformed" in str(exc).lower():
                raise _damaged(self.path, str(exc)) from None
            raise StoreError(f"store {self.path}: cannot be opened for writing: {explain(exc)}", source=self.path,
                             field="--store") from None
        return db

    def _open_readonly(self) -> sqlite3.Connection:
        # A WAL store in a folder we cannot write needs immutable=1 (no -shm file can be made);
        # plain mode=ro first, so a store another process is writing is read consistently.
        p = Path(self.path)
        if not p.exists():
            raise StoreError(f"store {self.path}: no such file", source=self.path, field="--store")
        if p.stat().st_size == 0 and not _nonempty(self.path + "-wal"):
            raise StoreError(f"store {self.path}: cannot be read as a harness store: the file is empty (0 bytes)",
                             source=self.path, field="--store")
        self._precheck(reading=True)
        uri = p.resolve().as_uri()
        error: BaseException | None = None
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(uri + query, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            except sqlite3.Error as exc:
                error = exc
                continue
            try:
                db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            except sqlite3.DatabaseError as exc:
                db.close()
                error = exc
                if "not a database" in str(exc).lower():
                    break
                continue
            return db
        raise StoreError(f"store {self.path}: cannot be read as a harness store: {explain(error)}", source=self.path,
                         field="--store")

    def _session_columns(self) -> tuple[str, ...]:
        have = {r[1] for r in self._db.execute("PRAGMA table_info(sessions)")}
        return tuple(k for k in _SESSION_KEYS if k in have)

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
                raise _damaged(self.path, str(exc)) from None
            raise StoreError(f"store {self.path}: cannot be read: {explain(exc)}", source=self.path, field="--store") from None

    # ------------------------------------------------------------------ writing
    def add(self, result: Result) -> None:
        """Insert one result record and commit it.

        StoreWriteError if it cannot be stored; then it is kept in a side file with every other
        record this process added, and the error names the file.
        """
        record = _clean(result.to_dict())
        self._kept.append(record)
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO results (run_id, session_id, run_key, schema_version, scenario, workload, backend,"
                " device, status, metric, median, started_at, record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                _row(record),
            )
        except sqlite3.Error as exc:
            raise self._keep_unsaved(exc) from None
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
        self._sessions_seen[session_id] = row
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
        if session_id in self._sessions_seen:
            self._sessions_seen[session_id].update(state="running", finished_at=None, owner=owner)
        try:
            self._db.execute("UPDATE sessions SET state='running', finished_at=NULL, owner=? WHERE session_id=?",
                             (json.dumps(owner), session_id))
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot resume session {session_id}, nothing was run: {explain(exc)}",
                             source=self.path, field="--store") from None

    def end_session(self, session_id: str, state: str) -> None:
        """Mark a session finished, interrupted or failed (StoreError if the store cannot take it)."""
        if session_id in self._sessions_seen:
            self._sessions_seen[session_id].update(state=state, finished_at=utc_now())
        try:
            self._db.execute(
                "UPDATE sessions SET finished_at=?, state=? WHERE session_id=?", (utc_now(), state, session_id)
            )
        except sqlite3.Error as exc:
            raise StoreError(f"store {self.path}: cannot mark session {session_id} {state}: {explain(exc)}",
                             source=self.path, field="--store") from None

    def _keep_unsaved(self, exc: BaseException) -> StoreWriteError:
        """Write every record of this process to a side file; the error that says where."""
        doc = {"harness_unsaved": 1, "store": str(Path(self.path).resolve()), "error": str(exc),
               "written_at": utc_now(), "sessions": [_session_doc(s) for s in self._sessions_seen.values()],
               "records": self._kept}
        text = json.dumps(doc, default=str)
        kept = None
        for target in self._side_targets():
            if _write_atomic(target, text):
                kept = self.side_file = str(target)
                break
        n = len(self._kept)
        if kept is None:
            sys.stderr.write("harness: the results below could not be stored or written to any file; "
                             "each line is one result record (JSON):\n")
            for record in self._kept:
                sys.stderr.write(json.dumps(record, default=str) + "\n")
            where = "could not be written to any file, so they were printed on standard error, one JSON record a line"
        else:
            where = f"are kept in {kept}"
        return StoreWriteError(
            f"store {self.path}: a result could not be stored: {explain(exc)}. Nothing measured is lost: that "
            f"result and every other one this process measured ({n} in all), with their session, {where}",
            source=self.path, kept_in=kept)

    def _side_targets(self) -> list[Path]:
        if self.side_file:
            return [Path(self.side_file)]
        store = Path(self.path)
        sessions = "-".join(sorted(self._sessions_seen))[:40] or "nosession"
        stamp = utc_now().replace(":", "").replace("-", "").split(".")[0]
        name = f"{store.name}{SIDE_MARK}{sessions}-{stamp}-{os.getpid()}.json"
        folders = [store.resolve().parent, Path.cwd(), Path(tempfile.gettempdir()), Path.home()]
        out: list[Path] = []
        for folder in folders:
            if folder not in [p.parent for p in out]:
                out.append(folder / name)
        return out

    def side_files(self) -> list[Path]:
        """Side files beside this store, left by a process that could not store its results."""
        store = Path(self.path).resolve()
        return sorted(p for p in store.parent.glob(f"{store.name}{SIDE_MARK}*.json") if p.is_file())

    def import_file(self, path: str | os.PathLike) -> dict:
        """Take in the records and sessions of a side file, a JSON array of records (`harness results
        --format json`) or another store, damaged or not (every row it can still read).

        Records already present (same run_id) are left as they are. Returns counts:
        records, new, sessions, new_sessions, unreadable.
        """
        records, sessions, unreadable = read_importable(path)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            new = 0
            for record in records:
                cursor = self._db.execute(
                    "INSERT OR IGNORE INTO results (run_id, session_id, run_key, schema_version, scenario, workload, backend,"
                    " device, status, metric, median, started_at, record) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    _row(_clean(record)))
                new += cursor.rowcount
            new_sessions = 0
            for s in sessions:
                state = "interrupted" if s.get("state") == "running" else s.get("state") or "interrupted"
                cursor = self._db.execute(
                    "INSERT OR IGNORE INTO sessions (session_id, started_at, finished_at, state, scenario_path, command, plan,"
                    " settings, owner) VALUES (?,?,?,?,?,?,?,?,?)",
                    (s["session_id"], s.get("started_at") or utc_now(), s.get("finished_at"), state, s.get("scenario_path"),
                     s.get("command"), json.dumps(s.get("plan") or [], default=str),
                     json.dumps(s.get("settings") or {}, default=str), json.dumps(s.get("owner")) if s.get("owner") else None))
                new_sessions += cursor.rowcount
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
        self._sessions_seen.setdefault(out["session_id"], dict(out))
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


def _row(record: dict) -> tuple:
    return (
        record["run_id"], record["session_id"], record.get("run_key"), record["schema_version"],
        record.get("scenario"), record.get("workload"), record.get("backend"), record.get("device"),
        record.get("status"), record.get("metric"), record.get("median"), record.get("started_at"),
        json.dumps(record, default=str),
    )


def _session_doc(session: dict) -> dict:
    return {k: session.get(k) for k in _SESSION_KEYS}


def _nonempty(path: str) -> bool:
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def _write_atomic(path: Path, text: str) -> bool:
    """Write text to path through a temporary file, fsync and rename; False if it cannot be written."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


# --------------------------------------------------------------------------- importing
def _bad(path, field: str, expected: str) -> InputError:
    return InputError(f"{path}: field `{field}`: expected {expected}; nothing was taken in", source=str(path), field=field)


def _check_record(path, i: int, record) -> dict:
    if not isinstance(record, dict):
        raise _bad(path, f"records[{i}]", f"a result record (a JSON object), got {type(record).__name__}")
    for key in ("run_id", "session_id"):
        value = record.get(key)
        if not isinstance(value, str) or not value:
            raise _bad(path, f"records[{i}].{key}", f"a non-empty string, got {value!r}"[:200])
    version = record.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _bad(path, f"records[{i}].schema_version", f"an integer, got {version!r}"[:200])
    return record


def _check_session(path, i: int, session) -> dict:
    if not isinstance(session, dict):
        raise _bad(path, f"sessions[{i}]", f"a session (a JSON object), got {type(session).__name__}")
    if not isinstance(session.get("session_id"), str) or not session["session_id"]:
        raise _bad(path, f"sessions[{i}].session_id", "a non-empty string")
    if not isinstance(session.get("plan", []), list):
        raise _bad(path, f"sessions[{i}].plan", "a list of planned runs")
    return session


def read_importable(path: str | os.PathLike) -> tuple[list[dict], list[dict], int]:
    """(records, sessions, rows that could not be read) of a side file, a JSON array of records or a
    store (read row by row from both ends, so the rows beside a damaged page are still read).
    InputError, naming the file and field, for anything else."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{path}: no such file (expected a side file, a JSON array of records or a store)",
                         source=str(path), field="--import")
    try:
        with open(p, "rb") as fh:
            head = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc}", source=str(path), field="--import") from None
    if head == SQLITE_HEADER:
        return _salvage(p)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not JSON ({exc}); expected a side file, a JSON array of records or a store",
                         source=str(path), field="--import") from None
    if isinstance(doc, list):
        return [_check_record(path, i, r) for i, r in enumerate(doc)], [], 0
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise _bad(path, "records", "a side file (a JSON object with a `records` list) or a JSON array of records")
    sessions = doc.get("sessions") or []
    if not isinstance(sessions, list):
        raise _bad(path, "sessions", "a list of sessions")
    return ([_check_record(path, i, r) for i, r in enumerate(doc["records"])],
            [_check_session(path, i, s) for i, s in enumerate(sessions)], 0)


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


def _salvage(p: Path) -> tuple[list[dict], list[dict], int]:
    uri = p.resolve().as_uri()
    db = None
    for query in ("?mode=ro", "?mode=ro&immutable=1"):
        try:
            db = sqlite3.connect(uri + query, uri=True, isolation_level=None)
            db.execute("SELECT name FROM sqlite_master").fetchall()
            break
        except sqlite3.DatabaseError:
            db = None
    if db is None:
        raise InputError(f"{p}: an SQLite file so damaged that not even its table list can be read; nothing taken in",
                         source=str(p), field="--import")
    try:
        records, unreadable = [], 0
        for text in _scan(db, "SELECT rowid, record FROM results").values():
            try:
                record = json.loads(text[0])
                records.append(_check_record(p, len(records), record))
            except (ValueError, TypeError, InputError):
                unreadable += 1
        try:
            columns = [r[1] for r in db.execute("PRAGMA table_info(sessions)")]
        except sqlite3.DatabaseError:
            columns = []
        columns = [c for c in _SESSION_KEYS if c in columns]
        sessions = []
        if "session_id" in columns:
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
    finally:
        db.close()
    return records, sessions, unreadable


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
