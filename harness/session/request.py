"""The values the application layer takes and gives: what a caller asks for (`SessionRequest`), the session it
is about to run (`PreparedSession`), and what it is told as it runs (`SessionObserver`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.results.record import Result
from harness.results.sessions import PlanEntry, SessionSettings
from harness.scenario.schema import Capacity
from harness.session.forecast import Forecast
from harness.session.limits import parse_time_limit
from harness.session.plan import RunSpec
from harness.session.rounds import AdaptiveRounds

if TYPE_CHECKING:  # the executors' package imports the runner, which a request's values need not load
    from harness.session.executors.settings import SlurmSettings


@dataclass(frozen=True)
class SessionRequest:
    """A session to start from a scenario file, or a stored one to resume: `harness run`'s arguments.

    `capacity`: the --capacity-* values given (start, limit, resolution); `memory_limit`: a size such as 4GiB;
    `command`: the command line stored with a new session (the Python call's own description by default).
    """

    scenario_file: str | None = None
    resume: str | None = None
    backends: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    store_path: str | None = None
    timeout: float | None = None
    max_runs: int | None = None
    find_max_batch: bool = False
    capacity: dict = field(default_factory=dict)
    memory_limit: str | None = None
    command: str | None = None
    #: run only the documents of a multi-document scenario file with these names (--document)
    documents: tuple[str, ...] = ()
    #: where the runs execute (harness.session.executors: local, slurm) and, for slurm, its settings
    executor: str = "local"
    slurm: SlurmSettings | None = None
    #: --time-limit as given (540, 9m, 1h30m, HH:MM:SS): start no run expected to end after it
    time_limit: str | None = None


@dataclass(frozen=True)
class Resumed:
    """What a resumed session has left: `left` of `planned` runs, or capacity searches (`what` says which)."""

    left: int
    planned: int
    what: str
    #: the session as read when what is left was counted (its owner): it is reopened only if no other process
    #: claimed it since, which would run the same runs
    seen: dict | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PreparedSession:
    """A session planned and checked, nothing written yet: its runs in order and, for a capacity search, each
    group of specs with its search settings. `entries`, `settings` and `command` are what a new session stores
    (None when resumed: the store has them); `resumed` says what a resumed session has left. Where and how long
    it runs (the executor, its Slurm settings, --time-limit) is the request's, read from it."""

    #: what the caller asked for, checked by prepare_session
    request: SessionRequest
    session_id: str
    plan: list[RunSpec]
    #: the plan's specs by scenario, each group with its capacity search's settings (None unless capacity_mode)
    groups: list[tuple[Capacity | None, list[RunSpec]]]
    capacity_mode: bool
    store_path: str
    memory_limit_bytes: int | None = None
    scenario_path: str | None = None
    entries: list[PlanEntry] | None = None
    settings: SessionSettings | None = None
    command: str | None = None
    resumed: Resumed | None = None
    #: the rounds added after the plan for `processes: auto` configurations (None: every count is fixed)
    rounds: AdaptiveRounds | None = None

    @property
    def time_limit_s(self) -> float | None:
        """--time-limit in seconds, counted from the session's start (None: none)."""
        return parse_time_limit(self.request.time_limit)


@dataclass(frozen=True)
class SessionStarted:
    """A session begun in its store, about to run: the environment's warnings and the forecast."""

    session_id: str
    runs: int
    store_path: str
    warnings: tuple[str, ...]
    forecast: Forecast


class SessionObserver:
    """What a session tells its caller as it goes; each method does nothing unless overridden."""

    def notice(self, text: str) -> None:
        """A note or warning for the person running the session (a side file taken in, a start moved up)."""

    def session_started(self, started: SessionStarted) -> None:
        """The session is begun in its store; its runs follow."""

    def run_started(self, i: int, n: int, spec: RunSpec) -> None:
        """Run i of n is starting."""

    def run_progress(self, spec: RunSpec, event: dict) -> None:
        """A progress event of the running worker (harness.timing.loop.run_timed's phases, a probe's end)."""

    def run_finished(self, i: int, n: int, result: Result) -> None:
        """Run i of n ended with this record (stored)."""
