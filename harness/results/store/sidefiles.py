"""Side files: where the results a store could not take are kept, so that nothing measured is lost.

A result that cannot be stored in mid-session (a full disk, a damaged page) is kept, with every
other result this process measured and its session's plan, in a JSON side file beside the store
(`<store>.unsaved-<session>-<time>-<pid>.json`; else in the working folder, the temporary folder
or the home folder; else printed on standard error). Its records are the rows the store would have
held (`Result.to_dict()`, figures that are not finite as null).

A side file names the process that writes it (`owner`): a session's journal is a side file written
before each result reaches the store, and while its process runs it is that session's, not one to
take in (`side_files` leaves it out).

Its form is JSON lines: a first line that says what the file is (`harness_unsaved: 2`, the store, the error,
the owner, the sessions), then one record a line. A result added to a journal is one line appended and
fsynced, so a session of N results writes each once, not the whole file N times; anything else (an error to
say, a session that changed, another folder) writes the whole file again, through a temporary file and a
rename. A line cut short by a crash in mid-append is the last one, and is left out when the file is read: its
result had not reached the store either. `read_side_file` reads this form and the single JSON object of
earlier versions (`harness_unsaved: 1`).
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
            owner = SessionOwner.of(json.loads(fh.readline())["owner"])  # the first line, in either form
    except (OSError, ValueError, KeyError, TypeError, RecursionError):  # no owner, or none that reads as one
        return False
    return owner_alive(owner) is True and owner.pid != os.getpid()


def read_side_file(text: str) -> dict:
    """A side file's text as one object (`records`, `sessions`, `owner`, ...): the JSON lines this version writes,
    its last line left out where a crash cut it short, or an earlier version's single JSON object. ValueError
    where it is neither."""
    first, _, rest = text.partition("\n")
    try:
        head = json.loads(first)
    except ValueError:  # a first line that is no JSON of its own: a document over several lines
        head = None
    if not (isinstance(head, dict) and head.get("harness_unsaved") == 2 and "records" not in head):
        # an earlier version's side file, one written (or rewritten by hand) as one object, or something else for
        # the caller to refuse
        return json.loads(text)
    lines = rest.split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if i < len(lines) - 1:  # a damaged line with whole lines after it: not a cut-short append
                raise
    return {**head, "records": records}


def _append(path: Path, size: int, lines: str) -> int | None:
    """Append lines to a side file of `size` bytes and fsync them: its new size, or None where it could not be
    appended to (it is no longer that file, or its folder takes no more), having cut the file back to what it
    held, so that no partial line is left for the next append to follow."""
    data = lines.encode("utf-8")
    try:
        with open(path, "r+b") as fh:
            if os.fstat(fh.fileno()).st_size != size:  # removed and made again, or changed by another hand
                return None
            fh.seek(size)
            try:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            except OSError:
                fh.truncate(size)
                raise
        return size + len(data)
    except OSError:
        return None


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
        #: what the side file at `path` holds: its first line but for the time, how many records follow it, and
        #: its size in bytes
        self._written: tuple[str, int, int] | None = None

    def write(self, error: str | None = None) -> str | None:
        """Every record and session in this process's side file, fsynced; its path, or None where no folder takes
        it. Where the file already holds the same first line and fewer records, the new records are appended;
        otherwise the whole file is written again and replaces the last one. Where its folder no longer takes it
        (a full disk), it moves to the next folder that does (`earlier` says where it was)."""
        head = {"harness_unsaved": 2, "store": str(Path(self.store_path).resolve()), "error": error,
                "owner": process_owner(), "sessions": [session_doc(s) for s in self.sessions.values()]}
        # the first line but for the time, each plan by its length: a plan of 10,000 runs is megabytes of JSON,
        # not to be written out again for each result appended
        said = json.dumps({**head, "sessions": [{**s, "plan": len(s["plan"] or [])} for s in head["sessions"]]},
                          default=str)
        if self.path and self._written and self._written[0] == said and self._written[1] <= len(self.records):
            new = "".join(json.dumps(r, default=str) + "\n" for r in self.records[self._written[1]:])
            size = _append(Path(self.path), self._written[2], new)
            if size is not None:
                self._written = (said, len(self.records), size)
                return self.path
        first = json.dumps({**head, "written_at": utc_now()}, default=str)
        text = "".join(line + "\n" for line in [first, *(json.dumps(r, default=str) for r in self.records)])
        for target in self._targets():
            if write_atomic(target, text):
                self._written = (said, len(self.records), len(text.encode("utf-8")))
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
