"""Side files: where the results a store could not take are kept, so that nothing measured is lost.

A result that cannot be stored in mid-session (a full disk, a damaged page) is kept, with every
other result this process measured and its session's plan, in a JSON side file beside the store
(`<store>.unsaved-<session>-<time>-<pid>.json`; else in the working folder, the temporary folder
or the home folder; else printed on standard error). Its records are the rows the store would have
held (`Result.to_dict()`, figures that are not finite as null).

A side file names the process that writes it (`owner`): a session's journal is a side file written
before each result reaches the store, and while its process runs it is that session's, not one to
take in (`side_files` leaves it out).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from harness.errors import StoreWriteError
from harness.results.record import utc_now
from harness.results.sessions import SessionOwner
from harness.results.store.failures import explain
from harness.results.store.liveness import owner_alive, process_owner
from harness.results.store.schema import session_doc

#: The name of a side file: `<store file name>.unsaved-<session>-<time>-<pid>.json`.
SIDE_MARK = ".unsaved-"


def side_file_base(store) -> str:
    """The path a store's side files and its sessions' journals are named after (`<it>.unsaved-...json`): the
    store's own `side_file_base` where it has one (SQLite: its file; PostgreSQL: `postgresql-HOST-PORT-DB` in
    the working folder), else, for a store given by URL, `SCHEME-HOST-PORT-PATH` in the working folder (never
    the URL as a path, never its password), else its path."""
    own = getattr(store, "side_file_base", None)
    if own:
        return str(own)
    location = getattr(store, "location", None)
    if location is None or not getattr(location, "url", False):
        return str(store.path)
    parts = urlsplit(location.identity)
    named = [parts.scheme, parts.hostname or "local", str(parts.port or ""), parts.path.strip("/")]
    return str(Path.cwd() / "-".join(re.sub(r"[^A-Za-z0-9._]", "_", p) for p in named if p))


def side_files(store_path: str) -> list[Path]:
    """Side files beside a store, left by a process that could not store its results or that ended before
    its session did; the journal of a session whose process still runs is not one of them."""
    store = Path(store_path).resolve()
    return sorted(p for p in store.parent.glob(f"{store.name}{SIDE_MARK}*.json") if p.is_file() and not _in_use(p))


def _in_use(path: Path) -> bool:
    """Whether a side file is the journal of a process that still runs (an unreadable one is not in use)."""
    try:
        with open(path, encoding="utf-8") as fh:
            owner = SessionOwner.of(json.load(fh)["owner"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # no owner, or none that reads as one
        return False
    return owner_alive(owner) is True and owner.pid != os.getpid()


def write_atomic(path: Path, text: str) -> bool:
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


class Unsaved:
    """Every record one process added to a store and the sessions it ran, ready to be written to a
    side file if the store fails to take one."""

    def __init__(self, store_path: str):
        self.store_path = store_path
        #: the stored rows of every record this process added
        self.records: list[dict] = []
        #: session id -> the session as the store holds it, for every session this process began or read
        self.sessions: dict[str, dict] = {}
        #: the side file of this process, once one was written
        self.path: str | None = None
        #: where it was written before its folder stopped taking it (each holds fewer records)
        self.earlier: list[str] = []

    def write(self, error: str | None = None) -> str | None:
        """Write (again) every record and session to this process's side file, fsynced before it replaces the
        last one; its path, or None where no folder takes it. Where its folder no longer takes it (a full disk),
        it moves to the next folder that does (`earlier` says where it was)."""
        doc = {"harness_unsaved": 1, "store": str(Path(self.store_path).resolve()), "error": error,
               "written_at": utc_now(), "owner": process_owner(),
               "sessions": [session_doc(s) for s in self.sessions.values()], "records": self.records}
        text = json.dumps(doc, default=str)
        for target in self._targets():
            if write_atomic(target, text):
                if self.path and self.path != str(target):
                    # the earlier copy stays until the session ends: removing it now could free the very space a
                    # full store is waiting for, and a store that then takes one result more fails less clearly
                    self.earlier.append(self.path)
                self.path = str(target)
                return self.path
        return None

    def keep(self, exc: BaseException) -> StoreWriteError:
        """Write every record of this process to a side file; the error that says where."""
        kept = self.write(str(exc))
        if kept is None:
            sys.stderr.write("harness: the results below could not be stored or written to any file; "
                             "each line is one result record (JSON):\n")
            for record in self.records:
                sys.stderr.write(json.dumps(record, default=str) + "\n")
            where = "could not be written to any file, so they were printed on standard error, one JSON record a line"
        else:
            where = f"are kept in {kept}"
        return StoreWriteError(
            f"store {self.store_path}: a result could not be stored: {explain(exc, self.store_path)}. Nothing measured is lost: that "
            f"result and every other one this process measured ({len(self.records)} in all), with their session, "
            f"{where}", source=self.store_path, kept_in=kept)

    def _targets(self) -> list[Path]:
        """Where the side file may go, first choice first: the one already written, then beside the store,
        the working folder, the temporary folder, the home folder."""
        store = Path(self.store_path)
        sessions = "-".join(sorted(self.sessions))[:40] or "nosession"
        stamp = utc_now().replace(":", "").replace("-", "").split(".")[0]
        name = f"{store.name}{SIDE_MARK}{sessions}-{stamp}-{os.getpid()}.json"
        folders = [store.resolve().parent, Path.cwd(), Path(tempfile.gettempdir()), Path.home()]
        out: list[Path] = [Path(self.path)] if self.path else []
        for folder in folders:
            if folder not in [p.parent for p in out]:
                out.append(folder / name)
        return out
