"""Opening a store file: checked before anything is written, created whole, opened for writing or reading.

A store is checked when it is opened (`PRAGMA quick_check`): a damaged file, a file that is not a
harness store, or an existing 0-byte file is refused (StoreError) and left exactly as it was.
A new store is built under a temporary name and linked into place in one step, so a file of 0
bytes is never one of harness's stores in the making. A `-wal` or `-shm` file found where harness is
about to create a store belongs to no store there (the store it was written for was deleted after its
process was killed): SQLite would replay that log into the new store and damage it, so both are moved
aside first (`NAME-wal.orphaned-TIME`), and the move is said on standard error.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import uuid
from pathlib import Path

from harness.errors import StoreError
from harness.results.store.failures import damaged, disk_full, explain
from harness.results.store.schema import SCHEMA, SESSION_ADDED

BUSY_TIMEOUT_MS = 60_000


def _refused(path: str, what: str, exc: BaseException | None) -> StoreError:
    return StoreError(f"store {path}: {what}: {explain(exc, path)}", source=path, field="--store")


def _remove_made(path: str, existed: dict[str, bool]) -> None:
    """On a full disk, the -wal and -shm files a refused opening made (left empty or cut short) are removed:
    a refused store is left as it was. Only then: with space, another process may have just made them."""
    if not disk_full(path):
        return
    for suffix, was in existed.items():
        if not was:
            try:
                os.unlink(path + suffix)
            except OSError:
                pass


def nonempty(path: str) -> bool:
    """Whether a file exists and holds at least one byte."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def check(db: sqlite3.Connection, path: str, *, reading: bool) -> None:
    """quick_check, then: a harness store, or an SQLite file with no tables yet (StoreError otherwise)."""
    cannot = "cannot be read as a harness store" if reading else "cannot be opened for writing"
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if "not a database" in str(exc).lower() or "encrypted" in str(exc).lower():
            raise _refused(path, cannot, exc) from None
        raise damaged(path, str(exc)) from None
    verdict = [str(r[0]) for r in rows]
    if verdict != ["ok"]:
        lines = [line for line in "\n".join(verdict).splitlines() if line.strip() and not line.startswith("***")]
        more = f" (and {len(lines) - 1} more problems)" if len(lines) > 1 else ""
        raise damaged(path, f"PRAGMA quick_check: {lines[0] if lines else 'not ok'}{more}")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if reading and "results" not in tables:
        raise StoreError(f"store {path}: {cannot}: it has no results table", source=path, field="--store")
    if tables and "results" not in tables:
        raise StoreError(
            f"store {path}: {cannot}: it is an SQLite database but not a harness store "
            f"(tables: {', '.join(sorted(tables))}); give another --store", source=path, field="--store")


def precheck(path: str, *, reading: bool) -> None:
    """Check the file through a read-only connection. Where no write-ahead log holds anything,
    an immutable one, which creates no -wal or -shm file, so a store that is refused is left
    exactly as it was; else a plain read-only one, which reads the log too (after a full disk
    the log can hold what the main file does not yet)."""
    query = "?mode=ro" if nonempty(path + "-wal") else "?mode=ro&immutable=1"
    try:
        db = sqlite3.connect(Path(path).resolve().as_uri() + query, uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        what = "cannot be read as a harness store" if reading else "cannot be opened for writing"
        raise _refused(path, what, exc) from None
    try:
        check(db, path, reading=reading)
    finally:
        db.close()


def set_aside_orphans(path: str) -> list[str]:
    """Move the `-wal` and `-shm` files at a path with no store file aside (never replayed into a new store); the
    names they were given, each said on standard error."""
    moved = []
    stamp = time.strftime("%Y%m%dT%H%M%S")
    for suffix in ("-wal", "-shm"):
        orphan = path + suffix
        # the store file checked again just before each move: a store another process has just made owns its log
        if os.path.lexists(orphan) and not os.path.exists(path):
            aside = f"{orphan}.orphaned-{stamp}-{os.getpid()}"
            try:
                os.rename(orphan, aside)
            except OSError as exc:
                raise _refused(path, f"cannot be created: {orphan} is left from a store no longer there and cannot "
                                     "be moved aside", exc) from None
            moved.append(aside)
    if moved:
        # the store layer has no display of its own, and this is said once, before anything else runs
        print(f"note: store {path}: moved {' and '.join(moved)} aside: left from a store no longer there, SQLite "
              "would have replayed it into the new one", file=sys.stderr)
    return moved


def create(path: str) -> None:
    """A new store, built under a temporary name and linked into place in one step."""
    final = Path(path)
    tmp = final.with_name(f".{final.name}.creating-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            for statement in SCHEMA:
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
        raise _refused(path, "cannot be created", exc) from None
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            try:
                os.unlink(f"{tmp}{suffix}")
            except OSError:
                pass


def _prepare_for_writing(db: sqlite3.Connection) -> None:
    """WAL, the busy timeout, the schema (columns added to an older store), all in one write that proves
    the store can be written now, not after the first hour of measuring."""
    db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("BEGIN IMMEDIATE")
    for statement in SCHEMA:
        db.execute(statement)
    have = {r[1] for r in db.execute("PRAGMA table_info(sessions)")}
    for column in SESSION_ADDED:
        if column not in have:
            db.execute(f"ALTER TABLE sessions ADD COLUMN {column} TEXT")
    db.execute("COMMIT")


def open_writable(path: str) -> sqlite3.Connection:
    """A connection that writes the store at path, created if there is none (StoreError if it cannot)."""
    p = Path(path)
    if not p.exists():
        set_aside_orphans(path)
        create(path)
    elif p.stat().st_size == 0 and not nonempty(path + "-wal"):
        raise StoreError(
            f"store {path}: the file is empty (0 bytes), so it is not a harness store: harness creates its "
            "stores whole, so an empty one lost its contents (a full disk, a failed copy) or was made by hand. "
            "It was left as it was; delete it to start a new store at this path, or give another --store",
            source=path, field="--store")
    precheck(path, reading=False)
    existed = {suffix: os.path.exists(path + suffix) for suffix in ("-wal", "-shm")}
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    except sqlite3.Error as exc:
        raise _refused(path, "cannot be opened for writing", exc) from None
    try:
        _prepare_for_writing(db)
    except sqlite3.Error as exc:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass
        db.close()
        if "malformed" in str(exc).lower():
            raise damaged(path, str(exc)) from None
        _remove_made(path, existed)
        raise _refused(path, "cannot be opened for writing", exc) from None
    return db


def open_readonly(path: str) -> sqlite3.Connection:
    """A connection that only reads the store at path (StoreError if it is missing, empty or not a store)."""
    # A WAL store in a folder we cannot write needs immutable=1 (no -shm file can be made);
    # plain mode=ro first, so a store another process is writing is read consistently.
    p = Path(path)
    if not p.exists():
        raise StoreError(f"store {path}: no such file", source=path, field="--store")
    if p.stat().st_size == 0 and not nonempty(path + "-wal"):
        raise StoreError(f"store {path}: cannot be read as a harness store: the file is empty (0 bytes)",
                         source=path, field="--store")
    precheck(path, reading=True)
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
    raise _refused(path, "cannot be read as a harness store", error)
