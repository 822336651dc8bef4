"""The session's journal: each result made durable outside the store before the store is given it, and
every result read back from the store when the session ends.

Whatever store a session writes (the SQLite file, a database server), a result it measured is first
written, fsynced, to the journal: a side file named and placed as the store's side files are
(`harness.results.store.sidefiles.side_file_base`: `<store file>.unsaved-<session>-...json` beside an
SQLite file, `postgresql-HOST-PORT-DB.unsaved-...json` in the working folder for a database) holding the session and every result so far. Only then is
the store given it. When the session ends, its results are read back through a fresh connection to
the store; the journal is removed once every one of them is there. Otherwise it stays where
`harness results --import` and `harness run --resume` take it (a resumed session counts its results
as done), and the session ends with a StoreWriteError that names it.

A process killed while writing (SIGKILL, SIGBUS from a store file made unwritable under it) leaves
the journal behind; the next session into that store takes it in, and `--resume` counts it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import threading
from pathlib import Path
from typing import Callable

from harness.errors import StoreWriteError
from harness.results.record import Result
from harness.results.sessions import (
    PlanEntry,
    SessionSettings,
    SessionSummary,
    StoredSession,
)
from harness.results.store import Store
from harness.results.store.schema import stored_record
from harness.results.store.sidefiles import Unsaved, read_side_file, side_file_base
from harness.session.interrupt import STOP_SIGNALS


def _reopen(store: Store) -> Store:
    """A fresh read-only connection to the store a session wrote (the same store: its own `reopen`)."""
    return store.reopen(readonly=True)


class Journal:
    """A store seen through the session's journal: `add` writes the result to the journal, then to the store;
    every other method of the Store protocol is the store's own, passed on one by one."""

    def __init__(self, store: Store, session: StoredSession, reopen: Callable[[Store], Store] | None = None):
        """`session` is the session as the store holds it (its id, plan, settings, state); `reopen` gives a
        fresh read-only view of the same store (by default the store's class opened `readonly` at its path)."""
        self.store = store
        self.session_id = session.session_id
        # named as the store's side files are, so `--resume` and the next session find it whatever the store
        self._kept = Unsaved(side_file_base(store))
        self._kept.sessions[self.session_id] = session.to_dict()  # the side file's JSON
        self._reopen = reopen or _reopen

    @property
    def file(self) -> str | None:
        """The journal file, once a result was written to it."""
        return self._kept.path

    @property
    def run_ids(self) -> list[str]:
        """The run ids of every result this session produced, in order."""
        return [r["run_id"] for r in self._kept.records]

    def add(self, result: Result) -> None:
        """The result written to the journal (fsynced), then given to the store (whose errors propagate).

        SIGINT and SIGTERM wait until both are done: an interrupt between the two would leave a result in the
        journal that the store never got, and the session would end calling it unreadable."""
        with _signals_held():
            self._kept.records.append(stored_record(result))
            self._kept.write()  # where no folder takes it, the result is as durable as the store; settle says so
            self.store.add(result)

    # ------------------------------------------------------------------ the rest of the Store protocol: the store's
    @property
    def path(self) -> str:
        """The store's name in messages."""
        return self.store.path

    @property
    def abandoned(self) -> list[str]:
        """The sessions the store marked abandoned when it was opened."""
        return self.store.abandoned

    def begin_session(self, session_id: str, plan: list[PlanEntry], *, scenario_path: str | None, command: str,
                      settings: SessionSettings | None = None) -> None:
        """The store's begin_session."""
        self.store.begin_session(session_id, plan, scenario_path=scenario_path, command=command, settings=settings)

    def reopen_session(self, session_id: str, seen: dict | None = None) -> None:
        """The store's reopen_session."""
        self.store.reopen_session(session_id, seen)

    def end_session(self, session_id: str, state: str) -> None:
        """The store's end_session."""
        self.store.end_session(session_id, state)

    def import_file(self, path: str | os.PathLike) -> dict:
        """The store's import_file."""
        return self.store.import_file(path)

    def results(self, session_ids: list[str] | None = None) -> list[Result]:
        """The store's results."""
        return self.store.results(session_ids)

    def records(self, session_ids: list[str] | None = None) -> list[dict]:
        """The store's records."""
        return self.store.records(session_ids)

    def find_sessions(self, session_id: str) -> list[str]:
        """The store's find_sessions."""
        return self.store.find_sessions(session_id)

    def resolve_session(self, prefix: str) -> str:
        """The store's resolve_session."""
        return self.store.resolve_session(prefix)

    def session(self, session_id: str) -> StoredSession | None:
        """The store's session."""
        return self.store.session(session_id)

    def sessions(self) -> list[SessionSummary]:
        """The store's sessions."""
        return self.store.sessions()

    def ok_medians(self, run_key: str) -> list[float]:
        """The store's ok_medians."""
        return self.store.ok_medians(run_key)

    def decided_results(self, session_id: str, status: str) -> list[tuple[str, int | None, str]]:
        """The store's decided_results."""
        return self.store.decided_results(session_id, status)

    def ok_results(self, session_id: str) -> list[tuple[str, int | None]]:
        """The store's ok_results."""
        return self.store.ok_results(session_id)

    def side_files(self) -> list[Path]:
        """The store's side files (this session's journal, whose process runs, is not one of them)."""
        return self.store.side_files()

    def reopen(self, *, readonly: bool = True) -> Store:
        """The store through a new connection (without the journal)."""
        return self.store.reopen(readonly=readonly)

    def close(self) -> None:
        """Close the store (the journal stays until `settle`)."""
        self.store.close()

    @property
    def unmerged(self) -> str | None:
        """The store's `unmerged` (after close)."""
        return self.store.unmerged

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the journal's own
    def missing(self) -> tuple[list[str], str | None]:
        """(run ids of this session's results a fresh view of the store does not give back, why none could be
        read where it could not be opened or read)."""
        wanted = self.run_ids
        if not wanted:
            return [], None
        try:
            with self._reopen(self.store) as reader:
                there = {r.get("run_id") for r in reader.records([self.session_id])}
        except Exception as exc:  # noqa: BLE001 - any store, any failure: what cannot be read back is not kept
            return wanted, str(exc).split(". ")[0].splitlines()[0] if str(exc) else type(exc).__name__
        return [run_id for run_id in wanted if run_id not in there], None

    def settle(self, state: str, error: StoreWriteError | None) -> StoreWriteError | None:
        """End the journal once the session is marked `state` and its store closed: removed where the store gives
        back every result (or another side file, `error.kept_in`, holds them all); else kept, and the
        StoreWriteError that says what could not be read back and where the results are."""
        missing, why = self.missing()
        if not missing and self.store.unmerged:  # read back, but only through the store's log: a second copy kept
            return self._keep_beside()
        if not missing:
            self._remove()
            return error
        if error is not None and error.kept_in and error.kept_in != self.file and _holds(error.kept_in, self.run_ids):
            self._remove()
            return error
        self._kept.sessions[self.session_id].update(state="failed" if state == "finished" else state)
        reason = f"store {self.store.path}: {len(missing)} of the {len(self.run_ids)} result(s) this session produced " \
                 f"cannot be read back from the store" + (f" ({why})" if why else "")
        kept = self._kept.write(reason)
        self._remove(only_earlier=True)
        if kept is None:  # no folder takes a file: every record on standard error, and the error that says so
            return self._kept.keep(RuntimeError(reason))
        return StoreWriteError(f"{reason}. Nothing measured is lost: all {len(self.run_ids)}, with their session, are "
                               f"kept in {kept}", source=self.store.path, kept_in=kept)

    def _keep_beside(self) -> StoreWriteError:
        """The journal kept as a second copy of results the store reads back only from its log (`unmerged`)."""
        reason = self.store.unmerged
        kept = self._kept.write(reason)
        self._remove(only_earlier=True)
        if kept is None:  # no folder takes a copy: the log is all there is, said all the same
            return StoreWriteError(f"{reason}. The store reads all {len(self.run_ids)} back; no folder took a second "
                                   "copy of them", source=self.store.path, in_store=True)
        return StoreWriteError(f"{reason}, such as `harness results --import {shlex.quote(kept)} --store "
                               f"{shlex.quote(self.store.path)}`, which takes nothing twice. Nothing measured is lost: "
                               f"the store reads all {len(self.run_ids)} back, and a copy of them, with their session, "
                               f"is kept in {kept}", source=self.store.path, kept_in=kept, in_store=True)

    def _remove(self, only_earlier: bool = False) -> None:
        """The journal's files removed (or only the earlier copies, each holding fewer results than the last)."""
        for path in [*self._kept.earlier, None if only_earlier else self.file]:
            if path:
                try:
                    os.unlink(path)
                except OSError:
                    pass


@contextlib.contextmanager
def _signals_held():
    """SIGINT, SIGTERM and SIGHUP held back: delivered, to the session's handlers, when the block ends.

    Python runs a signal's handler in the main thread at a bytecode boundary after the signal arrived, so a
    signal that arrived just before the block could run its handler inside it, whatever the thread's signal
    mask: in the main thread the handlers are swapped for ones that note the signal, and each noted signal
    is raised again once the session's handlers are back. Elsewhere (where Python allows no handler) the
    thread's mask holds them."""
    held = STOP_SIGNALS  # SIGHUP among them: the terminal gone stops a Slurm session too
    if threading.current_thread() is not threading.main_thread():  # no handler here: the thread's signal mask
        with _masked(held):
            yield
        return
    noted: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in held}
    try:
        for sig in held:
            signal.signal(sig, lambda signum, frame: noted.append(signum))
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(noted):
            signal.raise_signal(sig)


@contextlib.contextmanager
def _masked(held):
    """The signals `held` blocked in this thread for the block (nothing held where the platform cannot)."""
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _holds(path: str, run_ids: list[str]) -> bool:
    """Whether a side file holds a record of every run id."""
    try:
        with open(path, encoding="utf-8") as fh:
            have = {r.get("run_id") for r in read_side_file(fh.read()).get("records", []) if isinstance(r, dict)}
    except (OSError, ValueError, AttributeError, RecursionError):
        return False
    return set(run_ids) <= have
