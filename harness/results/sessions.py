"""A session as a store holds it, typed: its planned runs (`PlanEntry`), the settings that shape them
(`SessionSettings`), the process that owns it (`SessionOwner`), the whole of it (`StoredSession`) and its line in
the store's list (`SessionSummary`). They are JSON only in the store's rows and in side files (`to_dict`,
`from_dict`): a session read and written again is the session it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, StringConstraints

from harness.fields import FrozenDict, ListOf, RecordPart, frozen_mapping
from harness.scenario.schema import Capacity
from harness.seam.runspec import RunSpec


@dataclass(frozen=True)
class PlanEntry:
    """One planned run of a session: its spec and, in a capacity session, its search's settings (start, limit,
    resolution), so that --resume redoes the search alike."""

    spec: RunSpec
    capacity: Capacity | None = None

    @classmethod
    def from_dict(cls, entry: Mapping) -> "PlanEntry":
        """The entry from a stored plan's JSON object (any version); ValueError where it is no planned run."""
        capacity = entry["capacity"] if "capacity" in entry else None
        try:
            return cls(RunSpec.from_dict(dict(entry)),
                       Capacity.model_validate(capacity) if capacity is not None else None)
        except TypeError as exc:  # a field the spec cannot do without is missing
            raise ValueError(f"a planned run without {exc}") from None

    def to_dict(self) -> dict:
        """The entry's JSON object: the spec's, with `capacity` in a capacity session."""
        row = self.spec.to_dict()
        return {**row, "capacity": self.capacity.model_dump()} if self.capacity is not None else row


class SessionSettings(RecordPart):
    """What shapes a session's runs beyond its plan (--memory-limit, --timeout, the filters, --max-runs ...),
    stored with it so that --resume runs the rest alike; a session stored before these has none (`in` says which
    were stored)."""

    memory_limit_bytes: int | None = None
    #: --memory-limit as given (4GiB)
    memory_limit: str | None = None
    timeout_s: float | None = None
    find_max_batch: bool | None = None
    backends: ListOf(str) | None = None
    devices: ListOf(str) | None = None
    overrides: ListOf(str) | None = None
    max_runs: int | None = None
    documents: ListOf(str) | None = None


class SessionOwner(RecordPart):
    """The process that runs a session: its host, the host's boot, its pid and the pid's start time (so a
    reused pid is told apart; harness.results.store.liveness)."""

    host: str | None = None
    boot: str | None = None
    pid: int | None = None
    start: int | None = None


class SessionRow(BaseModel):
    """A session as a store's row, a side file or an import holds it, its JSON columns decoded: its id, every other
    column optional (None, or an empty plan, where absent); a column a newer version added is not read here."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    session_id: Annotated[str, StringConstraints(min_length=1)]
    started_at: str | None = None
    finished_at: str | None = None
    state: str | None = None
    scenario_path: str | None = None
    command: str | None = None
    #: the planned runs as written (JSON objects, of whatever version planned them)
    plan: Annotated[list, BeforeValidator(lambda value: [] if value is None else value)] = []
    settings: dict | None = None
    owner: dict | None = None


@dataclass(frozen=True)
class StoredSession:
    """A session as its store holds it: when it started and ended, its state (running, finished, interrupted,
    failed, abandoned), its scenario, the command that started it, its plan, settings and owner."""

    session_id: str
    started_at: str | None = None
    finished_at: str | None = None
    state: str | None = None
    scenario_path: str | None = None
    command: str | None = None
    #: the planned runs as the store holds them (JSON objects, of whatever version planned them): `entries()`
    #: reads them, and they are written back (a side file) as they were
    plan: tuple[FrozenDict, ...] = ()
    settings: SessionSettings = field(default_factory=SessionSettings)
    owner: SessionOwner | None = None

    @property
    def capacity_mode(self) -> bool:
        """Whether the session searched capacities (its entries carry the search's settings)."""
        return any("capacity" in entry for entry in self.plan)

    def entries(self) -> list[PlanEntry]:
        """The planned runs, typed; ValueError, naming the entry, for one that is no planned run."""
        out = []
        for i, entry in enumerate(self.plan):
            try:
                out.append(PlanEntry.from_dict(entry))
            except ValueError as exc:
                raise ValueError(f"session {self.session_id}: plan[{i}]: {str(exc).splitlines()[0]}") from None
        return out

    @classmethod
    def planned(cls, session_id: str, entries: list[PlanEntry], **fields) -> "StoredSession":
        """A session of these planned runs (as a store would hold it once begun)."""
        return cls(session_id, plan=tuple(frozen_mapping(entry.to_dict()) for entry in entries), **fields)

    @classmethod
    def from_dict(cls, row: Mapping) -> "StoredSession":
        """The session from its row (a database's, a side file's), its plan, settings and owner decoded from their
        JSON; ValueError for settings or an owner of the wrong type."""
        read = SessionRow.model_validate(dict(row))
        return cls(session_id=read.session_id, started_at=read.started_at, finished_at=read.finished_at,
                   state=read.state, scenario_path=read.scenario_path, command=read.command,
                   plan=tuple(frozen_mapping(entry) for entry in read.plan if isinstance(entry, Mapping)),
                   settings=SessionSettings.of(read.settings or {}),
                   owner=SessionOwner.of(read.owner) if read.owner is not None else None)

    def to_dict(self) -> dict:
        """The session's row, its plan, settings and owner as JSON values (a side file keeps it so)."""
        return {"session_id": self.session_id, "started_at": self.started_at, "finished_at": self.finished_at,
                "state": self.state, "scenario_path": self.scenario_path, "command": self.command,
                "plan": [dict(entry) for entry in self.plan], "settings": self.settings.to_dict(),
                "owner": self.owner.to_dict() if self.owner is not None else None}


@dataclass(frozen=True)
class SessionSummary:
    """A session's line in the store's list: when it started, its state, its scenario, and how many results it has
    stored (and how many of them ok)."""

    session_id: str
    started_at: str | None
    state: str | None
    scenario_path: str | None
    results: int
    ok: int


@dataclass(frozen=True)
class UnfinishedSession:
    """A session that ended before its plan did (interrupted, failed, abandoned, still running): how many of its
    planned runs (or capacity searches: `what`) have no ok result, which `--resume` would run."""

    session_id: str
    state: str | None
    planned: int
    left: int
    what: str = "run(s)"
