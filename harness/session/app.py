"""The application layer: starting or resuming a session, running it (its runs, or its capacity searches) and
finishing it, callable from Python without a command line.

    prepared = prepare_session(SessionRequest(scenario_file="quickstart"), observer)   # InputError if wrong
    finished = run_session(prepared, observer)                                          # stored as it runs
    finished.exit_code, finished.outcome.records                                        # list[Result]

Progress reaches the caller through a `SessionObserver`; bad input raises InputError before anything is
written. A session is never left `running` by a process that has ended: whatever stops it, it is marked.
"""

from __future__ import annotations

import faulthandler
import shlex
import shutil
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError, StoreError, StoreWriteError
from harness.machine.envcheck import environment_warnings
from harness.results.record import Result, utc_now
from harness.results.sessions import SessionOwner, SessionSettings, StoredSession
from harness.results.store import (
    Store,
    open_store,
    parse_location,
    process_owner,
    store_exists,
)
from harness.session.capacity import find_max_batch
from harness.session.executors import executor_for
from harness.session.forecast import Durations, Forecast, forecast
from harness.session.interrupt import Interrupted, trap_signals
from harness.session.journal import Journal
from harness.session.limits import (
    TimeLimit,
    check_timeout,
    parse_size,
    parse_time_limit,
)
from harness.session.plan import RunSpec
from harness.session.request import (
    PreparedSession,
    SessionObserver,
    SessionRequest,
    SessionStarted,
)
from harness.session.resume import prepare_resume
from harness.session.runner import Runner, SessionOutcome
from harness.session.start import prepare_start

__all__ = ["EXIT_NOTHING_MEASURED", "EXIT_TIME_LIMIT", "FinishedSession", "LOW_DISK_BYTES", "PreparedSession",
           "SessionObserver", "SessionRequest", "SessionStarted", "planned_forecast", "prepare_session", "run_session"]

#: Exit code of a session that finished with no run ok and none failed: every run was `unsupported`
#: (a device that is not there, a combination no backend can run), so nothing was measured.
EXIT_NOTHING_MEASURED = 3

#: Exit code of a session its --time-limit stopped before a run: it has runs left, and `--resume` goes on with them
#: (EX_TEMPFAIL of sysexits.h: try again later).
EXIT_TIME_LIMIT = 75

#: Free space below which the store's file system is called nearly full when a session starts.
LOW_DISK_BYTES = 64 * 2**20


@dataclass(frozen=True)
class FinishedSession:
    """How a session ended: its records (in plan order, list[Result]), the state it was marked with (finished,
    interrupted, failed), the signal that interrupted it, the store's write error, and the exit code."""

    session_id: str
    store_path: str
    planned: int
    outcome: SessionOutcome
    state: str

    @property
    def records(self) -> list[Result]:
        """The session's records, in plan order."""
        return self.outcome.records

    @property
    def failed(self) -> list[Result]:
        """The records whose status makes the session fail."""
        return self.outcome.failed

    @property
    def nothing_measured(self) -> bool:
        """Every run an answer (unsupported), none a measurement: a CI job must not pass on that."""
        return bool(self.records) and not self.failed and not any(r.status == "ok" for r in self.records)

    @property
    def exit_code(self) -> int:
        """1 for a store that failed or a run that did not succeed, 128 + the signal for an interrupted session,
        EXIT_TIME_LIMIT for one its --time-limit stopped, EXIT_NOTHING_MEASURED when no run measured anything,
        else 0."""
        if self.outcome.store_error is not None:
            return 1
        if self.outcome.interrupted:
            return 128 + int(self.outcome.interrupted)
        if self.outcome.time_limit is not None:
            return EXIT_TIME_LIMIT
        if self.failed:
            return 1
        return EXIT_NOTHING_MEASURED if self.nothing_measured else 0

    @property
    def resume_command(self) -> str:
        """The command that finishes the session."""
        return f"harness run --resume {self.session_id} --store {shlex.quote(self.store_path)}"


#: Why a capacity search takes no --time-limit.
_CAPACITY_NO_LIMIT = ("--time-limit: a capacity search's time depends on its probes, which no earlier run foretells; "
                      "run it without the option")


def prepare_session(request: SessionRequest, observer: SessionObserver | None = None) -> PreparedSession:
    """The session a request asks for, planned and checked (InputError for bad input); nothing is written."""
    observer = observer or SessionObserver()
    # every option is checked before anything is read, planned or written
    check_timeout(request.timeout)
    limit_bytes = parse_size(request.memory_limit) if request.memory_limit is not None else None
    time_limit_s = parse_time_limit(request.time_limit)
    if time_limit_s is not None and request.executor != "local":
        raise InputError(f"--time-limit is for runs on this machine; under --executor {request.executor} each job has "
                         "its own time limit (--slurm-time), and the session waits for the scheduler",
                         field="--time-limit")
    if time_limit_s is not None and request.find_max_batch:
        raise InputError(_CAPACITY_NO_LIMIT, field="--time-limit")
    if request.resume is not None and request.scenario_file:
        raise InputError("give either SCENARIO_FILE or --resume SESSION, not both", field="--resume")
    if request.resume is None and not request.scenario_file:
        raise InputError("missing SCENARIO_FILE (or --resume SESSION)", field="SCENARIO_FILE")
    if request.executor != "local" and request.find_max_batch:
        raise InputError(f"--find-max-batch runs its probes one after another on this machine; it takes no "
                         f"--executor {request.executor}", field="--executor")
    if request.resume is not None:
        prepared = prepare_resume(request, limit_bytes)
    else:
        prepared = prepare_start(request, limit_bytes, observer.notice)
    if request.executor != "local" and prepared.capacity_mode:
        raise InputError(f"a capacity search runs its probes one after another on this machine; it takes no "
                         f"--executor {request.executor}", field="--executor")
    if time_limit_s is not None and prepared.capacity_mode:
        raise InputError(_CAPACITY_NO_LIMIT, field="--time-limit")
    return prepared


def _stored_records(path) -> list[Result]:
    """The records of a store, for an estimate; none where there is no store or it cannot be read."""
    location = parse_location(str(path)) if path else None
    if location is None or not store_exists(location):
        return []
    try:
        with open_store(location, readonly=True) as store:
            return store.results()
    except (InputError, OSError):
        return []


def planned_forecast(prepared: PreparedSession) -> Forecast:
    """The forecast of a prepared session from the records already in its store (read only)."""
    return forecast(prepared.plan, _stored_records(prepared.store_path), prepared.capacity_mode)


def _mark(store: Store, session_id: str, state: str, observer: SessionObserver) -> None:
    """Mark a session's end state; a store that cannot take it is reported, not raised."""
    try:
        store.end_session(session_id, state)
    except StoreError as exc:
        observer.notice(f"warning: {exc} (the next harness run into this store marks it)")


def _take_in_side_files(store: Store, observer: SessionObserver) -> None:
    """Results an earlier process could not store, taken in first; a nearly full disk and abandoned sessions noted."""
    for side in store.side_files():
        counts = store.import_file(side)
        try:
            side.unlink()
        except OSError:
            pass
        observer.notice(f"took in {counts['new']} result(s) kept in {side} by a session that could not store them "
                        "or ended before it could")
    try:
        free = shutil.disk_usage(Path(store.path).resolve().parent).free
    except OSError:
        free = None
    if free is not None and free < LOW_DISK_BYTES:
        observer.notice(f"warning: only {free / 2**20:.0f} MiB free where the store is ({store.path}); a result it "
                        "cannot take is kept in a side file, and the session stops")
    for abandoned in store.abandoned:
        observer.notice(f"note: session {abandoned} was left running by a process that has ended; it is marked "
                        f"abandoned (finish it with: harness run --resume {abandoned} --store {shlex.quote(store.path)})")


def _begin(store: Store, prepared: PreparedSession) -> None:
    """A new session written to the store with its plan and settings, or a resumed one reopened."""
    if prepared.resumed is not None:
        store.reopen_session(prepared.session_id, prepared.resumed.seen)
        return
    store.begin_session(prepared.session_id, prepared.entries, scenario_path=prepared.scenario_path,
                        command=prepared.command, settings=prepared.settings)


def _journal(store: Store, prepared: PreparedSession) -> Journal:
    """The session's journal over its store, holding the session as the store does (as planned where the store
    cannot give it back)."""
    try:
        session = store.session(prepared.session_id)
    except StoreError:
        session = None
    if session is None:
        session = StoredSession.planned(prepared.session_id, prepared.entries or [], started_at=utc_now(),
                                        state="running", scenario_path=prepared.scenario_path,
                                        command=prepared.command, settings=prepared.settings or SessionSettings(),
                                        owner=SessionOwner.of(process_owner()))
    return Journal(store, session)


def _settle(journal: Journal, state: str, outcome: SessionOutcome, observer: SessionObserver) -> str:
    """Read every result of the session back from its (closed) store; where one is not there, the outcome's
    store error says so and where they are kept, and the session is marked failed where the store takes it."""
    before = outcome.store_error
    outcome.store_error = journal.settle(state, before)
    if outcome.store_error is None or outcome.store_error is before or outcome.store_error.in_store:
        return state
    if not store_exists(journal.store.path):  # a store file removed under the session: none is made in its stead
        return "failed"
    try:
        with journal.store.reopen(readonly=False) as again:  # the same store, opened for writing
            _mark(again, journal.session_id, "failed", observer)
    except StoreError:
        pass  # a store that cannot be opened is what the error already says
    return "failed"


def _execute(store: Store, prepared: PreparedSession, observer: SessionObserver) -> SessionOutcome:
    """Run the plan (or the capacity searches); every way it can end is in the outcome."""
    outcome = SessionOutcome()
    with trap_signals():
        try:
            try:
                records = store.results()
            except (InputError, OSError):
                records = []
            observer.session_started(SessionStarted(
                prepared.session_id, len(prepared.plan), store.path, tuple(environment_warnings()),
                forecast(prepared.plan, records, prepared.capacity_mode)))
            runner = Runner(store, on_start=observer.run_started, on_result=observer.run_finished,
                            on_progress=observer.run_progress, memory_limit_bytes=prepared.memory_limit_bytes,
                            executor=executor_for(prepared.request.executor, prepared.request.slurm, observer.notice),
                            time_limit=_time_limit(prepared, records))
            try:
                if prepared.capacity_mode:
                    _search_groups(runner, prepared, outcome)
                else:
                    part = runner.run(prepared.plan, _more_rounds(store, prepared))
                    outcome.records.extend(part.records)
                    outcome.interrupted, outcome.store_error = part.interrupted, part.store_error
                    outcome.time_limit = part.time_limit
            finally:
                runner.close()
        except (Interrupted, KeyboardInterrupt) as exc:
            outcome.interrupted = exc.signum if isinstance(exc, Interrupted) else int(signal.SIGINT)
    return outcome


def _time_limit(prepared: PreparedSession, stored: list[Result]) -> TimeLimit | None:
    """The session's --time-limit, from now, judging each run by the store's earlier records and the session's own."""
    if prepared.time_limit_s is None:
        return None
    durations = Durations(stored)

    def expected(spec, done: list[Result]):
        durations.add(done)
        return durations.expected(spec)

    return TimeLimit(prepared.time_limit_s, expected)


def _more_rounds(store: Store, prepared: PreparedSession):
    """The runner's source of added rounds (`processes: auto`): each from every result the session has, in the
    store (earlier runs of a resumed session included) or, where the store cannot say, those of this run."""
    rounds = prepared.rounds
    if rounds is None:
        return None

    def more(records: list[Result]) -> list[RunSpec]:
        try:
            known = store.results([prepared.session_id])
        except (InputError, OSError, sqlite3.Error):
            known = []
        ids = {r.run_id for r in known}
        return rounds.next_round(known + [r for r in records if r.run_id not in ids])

    return more


def _search_groups(runner: Runner, prepared: PreparedSession, outcome: SessionOutcome) -> None:
    """Each group's capacity search in turn, until one is interrupted or the store fails."""
    for search, specs in prepared.groups:
        try:
            part = find_max_batch(runner, specs, start=search.start, limit=search.limit,
                                  resolution=search.resolution, steps=search.steps)
        except StoreWriteError as exc:
            outcome.store_error = exc
            return
        outcome.records.extend(part.records)
        if part.interrupted:
            outcome.interrupted = part.interrupted
            return


def _say_fatal_signals() -> bool:
    """Fatal signals (SIGBUS, SIGSEGV) reported on standard error from now on; False (to undo it later)."""
    faulthandler.enable()
    return False


def _end_state(outcome: SessionOutcome) -> str:
    if outcome.store_error is not None:
        return "failed"
    return "interrupted" if outcome.interrupted or outcome.time_limit is not None else "finished"


def run_session(prepared: PreparedSession, observer: SessionObserver | None = None) -> FinishedSession:
    """Begin (or reopen) the prepared session in its store, run it, mark how it ended and close the store.

    Runs are stored as they end; SIGINT/SIGTERM stop the session cleanly (the outcome says which). Any other
    exception marks the session failed (interrupted for Ctrl-C) before it propagates.
    """
    observer = observer or SessionObserver()
    store = open_store(prepared.store_path)
    if prepared.resumed is not None:
        store.session(prepared.session_id)  # known to the store, for a side file
    begun = False
    # a store file made unwritable under the session (its mapped -shm) ends this process with SIGBUS, which no
    # handler can survive: it then says so on standard error; every result it had measured is in the journal
    bus_error_said = faulthandler.is_enabled() or _say_fatal_signals()
    try:
        _take_in_side_files(store, observer)
        _begin(store, prepared)
        begun = True
        journal = _journal(store, prepared)
        outcome = _execute(journal, prepared, observer)
    except BaseException as exc:
        if begun:  # a session is never left running by a process that has ended
            _mark(store, prepared.session_id,
                  "interrupted" if isinstance(exc, (Interrupted, KeyboardInterrupt)) else "failed", observer)
        store.close()
        if not bus_error_said:
            faulthandler.disable()
        raise
    state = _end_state(outcome)
    with trap_signals(signal.SIG_IGN):  # a second Ctrl-C does not stop the session from being marked
        _mark(store, prepared.session_id, state, observer)
        store.close()
        state = _settle(journal, state, outcome, observer)
    if not bus_error_said:
        faulthandler.disable()
    return FinishedSession(prepared.session_id, store.path, len(prepared.plan), outcome, state)
