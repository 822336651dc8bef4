"""The store seam: what a results store is to the rest of harness (`Store`), and how one is opened.

`Store` lists exactly what the session, compare, report, the results page and the commands call on a
store; the SQLite and PostgreSQL stores (sqlstore.SQLStore) and the session's journal
(harness.session.journal.Journal) each implement all of it. A store class (`StoreClass`) is registered
by the scheme of the locations it serves (`registry`), and `open_store` is the one way to open one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, runtime_checkable

from harness.results.record import Result
from harness.results.sessions import (
    PlanEntry,
    SessionSettings,
    SessionSummary,
    StoredSession,
)
from harness.results.store.location import StoreLocation, parse_location
from harness.results.store.registry import store_class


@runtime_checkable
class Store(Protocol):
    """A results store: records added as they finish and read back, sessions begun and ended, imports."""

    #: what every message and --store hint calls the store: a file's path, a URL without its password
    path: str
    #: sessions found `running` with their owner gone, marked `abandoned` when the store was opened for writing
    abandoned: list[str]
    #: once closed: None where every committed record is in the store itself, else where they are and why (an
    #: SQLite file that no longer takes writes keeps its last records in its write-ahead log)
    unmerged: str | None

    def add(self, result: Result) -> None:
        """Store one record, committed at once; StoreWriteError (which names the side file keeping it) if it cannot."""

    def begin_session(self, session_id: str, plan: list[PlanEntry], *, scenario_path: str | None, command: str,
                      settings: SessionSettings | None = None) -> None:
        """Record a new session `running`, owned by this process, with its plan and settings; StoreError if not."""

    def reopen_session(self, session_id: str, seen: dict | None = None) -> None:
        """Make a stored session `running` again, owned by this process (--resume); StoreError if it cannot be, or
        where `seen` (the session as read when its plan was made) is given and another process took it since."""

    def end_session(self, session_id: str, state: str) -> None:
        """Mark a session finished, interrupted or failed; StoreError if the store cannot take it."""

    def import_file(self, path: str | os.PathLike) -> dict:
        """Take in a side file, a JSON array of records or another store: counts records, new, sessions,
        new_sessions, unreadable."""

    def results(self, session_ids: list[str] | None = None) -> list[Result]:
        """Every stored record (of the given sessions), oldest first, typed."""

    def records(self, session_ids: list[str] | None = None) -> list[dict]:
        """Every stored record (of the given sessions), oldest first, as the flat rows exports and pandas take."""

    def find_sessions(self, session_id: str) -> list[str]:
        """Ids of the stored sessions an id names: itself, else those it is a prefix of."""

    def resolve_session(self, prefix: str) -> str:
        """The one session an id or unique prefix names (stored, or of stored records); InputError otherwise."""

    def session(self, session_id: str) -> StoredSession | None:
        """A stored session (a unique prefix of its id is enough) with its plan, settings and owner, or None."""

    def sessions(self) -> list[SessionSummary]:
        """Every session, oldest first, with its counts of results and of ok ones."""

    def ok_medians(self, run_key: str) -> list[float]:
        """The medians of every `ok` record of one configuration (any session), oldest first."""

    def decided_results(self, session_id: str, status: str) -> list[tuple[str, int | None, str]]:
        """(run_key, replicate or None, error) of every result of a session with `status`."""

    def ok_results(self, session_id: str) -> list[tuple[str, int | None]]:
        """(run_key, replicate or None) of every `ok` result of a session, one entry per result."""

    def side_files(self) -> list[Path]:
        """Side files this store's writers left with results it could not take (a running session's journal not)."""

    def reopen(self, *, readonly: bool = True) -> Store:
        """The same store through a new connection."""

    def close(self) -> None:
        """Close it (every record is committed already)."""

    def __enter__(self) -> Store:
        """The store itself, closed when the block ends."""

    def __exit__(self, *exc) -> None:
        """Close it."""


@runtime_checkable
class StoreClass(Protocol):
    """What the registry holds for a scheme: a class that opens a store at a location and says whether one is there."""

    def __call__(self, location: StoreLocation, *, readonly: bool = False) -> Store:
        """Open the store (StoreError, one line, exit 2, for one that is damaged, unreachable or not a store)."""

    def exists(self, location: StoreLocation) -> bool:
        """Whether there may be a store to read at the location (a file that exists; a server: always)."""


def open_store(location: StoreLocation | str | os.PathLike | None = None, *, readonly: bool = False) -> Store:
    """The store at `location` (a --store value, parsed; None: HARNESS_STORE or harness.db), opened by the class its
    scheme is registered to: for writing (made if there is none), or only for reading. StoreError (exit 2) for an
    unknown scheme or a store that cannot be opened."""
    parsed = parse_location(location)
    return store_class(parsed)(parsed, readonly=readonly)


def store_exists(location: StoreLocation | str | os.PathLike) -> bool:
    """Whether there is a store to read at `location`: a file that exists, or any database server URL (connecting
    says whether it holds a store). StoreError for an unknown scheme."""
    parsed = parse_location(location)
    return store_class(parsed).exists(parsed)
