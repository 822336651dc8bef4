"""Reading result records for a comparison: the one place that says what a record's configuration key,
backend variant and per-process value are.

Comparisons take `Result` objects; rows (a stored record's dict, the DataFrame `harness.load_results`
gives) are typed at the door by `as_results`.
"""

from __future__ import annotations

import json
import math
from typing import Iterable

from harness.errors import InputError
from harness.machine.variables import variables
from harness.results.record import Result
from harness.results.store import Store, open_store, parse_location, store_exists
from harness.seam.backend import available_backends, backend_names
from harness.timing import stats
from harness.workloads import WORKLOADS

#: Record fields that may be compared (`--by`), beside any neutral parameter.
BY_FIELDS = ("backend", "device", "device_name", "framework_version", "session_id", "scenario")
#: Record fields that identify a configuration; records match when all of these agree (except `by`).
KEY_FIELDS = ("workload", "scenario", "metric", "backend", "device", "device_name")
#: Fields that name the same thing as another: comparing one frees the other from the match.
LINKED = {"device": ("device_name",), "device_name": ("device",), "backend": ("framework_version",)}


def missing(value) -> bool:
    """None or NaN: a figure that was not measured."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def hashable(value):
    """A value usable as (part of) a dict key: dicts and lists as their sorted JSON."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, default=str)
    return value


# --------------------------------------------------------------------------- records in
def as_results(records) -> list[Result]:
    """Results from Results, record rows or a DataFrame (pandas NaN becomes None)."""
    if hasattr(records, "to_dict"):
        records = records.to_dict(orient="records")
    return [r if isinstance(r, Result) else Result.from_dict({k: (None if missing(v) else v) for k, v in r.items()})
            for r in records]


def as_records(records) -> list[dict]:
    """A list of record dicts from Results, record rows or a DataFrame (pandas NaN becomes None)."""
    if hasattr(records, "to_dict"):
        records = records.to_dict(orient="records")
    return [r.to_dict() if isinstance(r, Result) else {k: (None if missing(v) else v) for k, v in r.items()}
            for r in records]


def ok_records(records) -> list[Result]:
    """The records with status ok (the only ones whose figures mean anything), capacity probes left out."""
    return [r for r in as_results(records) if r.status == "ok" and not r.probe_of]


def refuse_empty_session(sessions: Iterable[str | None]) -> None:
    """InputError (exit 2) for a --session given as '' or spaces: a prefix of every id, it would name them all."""
    for session in sessions:
        if session is not None and not str(session).strip():
            raise InputError(f"--session {session!r}: expected a session id (or a unique prefix of one), got an "
                             "empty one", field="--session")


#: The `--session` value that names the newest session with results in the store.
LATEST = "latest"


def latest_session(store: Store, path: str) -> str:
    """The id of the newest stored session that has results (where the store holds records without their
    session, imported ones, the session of the newest record); InputError where there is none."""
    measured = [s.session_id for s in store.sessions() if s.results]
    if not measured:
        records = sorted((r for r in store.results() if r.session_id), key=lambda r: str(r.started_at or ""))
        measured = [records[-1].session_id] if records else []
    if not measured:
        raise InputError(f"--session {LATEST}: store {path} holds no session with results", source=path,
                         field="--session")
    return measured[-1]


def resolve_latest(store_path: str | None, sessions: Iterable[str]) -> tuple[str, ...]:
    """The `--session` values with `latest` replaced by the id of the store's newest session with results
    (the store is opened only where one says `latest`)."""
    sessions = tuple(sessions)
    if LATEST not in sessions:
        return sessions
    location = parse_location(store_path)
    if not store_exists(location):
        raise InputError(f"store {location.display}: no such file", source=location.display, field="--store")
    with open_store(location, readonly=True) as store:
        newest = latest_session(store, location.display)
    return tuple(newest if s == LATEST else s for s in sessions)


def _session_ids(store: Store, path: str, sessions: Iterable[str]) -> list[str]:
    """The full ids of the named sessions (unique id prefixes accepted); InputError for one that names none."""
    full_ids = []
    for session in sessions:
        found = store.session(session)
        if found is not None:
            full_ids.append(found.session_id)
            continue
        ids = sorted({r.session_id for r in store.results() if str(r.session_id).startswith(session)})
        if len(ids) != 1:
            known = ", ".join(s.session_id for s in store.sessions()) or "none"
            raise InputError(f"store {path}: no single session matches {session!r} (sessions: {known})",
                             source=path, field="--session")
        full_ids.append(ids[0])
    return full_ids


def load_records(store_path: str | None, sessions: Iterable[str] = ()) -> list[Result]:
    """Records of a store (of the given sessions; unique id prefixes accepted); InputError if none, or for a session
    given empty (which, as a prefix of every id, would name them all)."""

    refuse_empty_session(sessions)
    location = parse_location(store_path)
    path = location.display
    if not store_exists(location):
        raise InputError(f"store {path}: no such file", source=path, field="--store")
    with open_store(location, readonly=True) as store:
        full_ids = _session_ids(store, path, sessions)
        records = store.results(full_ids or None)
    if not records:
        what = f"sessions {', '.join(full_ids)}" if full_ids else "any session"
        raise InputError(f"store {path}: no results for {what}", source=path, field="--store")
    return records


# --------------------------------------------------------------------------- the backend variant
def canonical_backend(name: str) -> str:
    """The canonical spelling of a backend or backend variant (`tf[keras=keras3]` -> `tensorflow[keras=keras3]`)."""

    name = name.strip()
    head, bracket, rest = name.partition("[")
    return backend_names().get(head.strip().lower(), head.strip()) + (bracket + rest if bracket else "")


_OPTION_DEFAULTS: dict[tuple, dict] = {}


def option_defaults(backend: str | None) -> dict:
    """A backend's options at their defaults ({} for a backend that is not registered here or has none)."""

    key = (variables().backends, backend)  # the registry depends on it
    if key not in _OPTION_DEFAULTS:
        defaults: dict = {}
        try:
            known = available_backends().get(backend)
            if known is not None:
                defaults = known.options_model().model_dump()
        except Exception:  # a backend whose options cannot be built empty: every option counts
            defaults = {}
        _OPTION_DEFAULTS[key] = defaults
    return _OPTION_DEFAULTS[key]


def backend_options(record: Result) -> dict:
    """The record's backend options that differ from their defaults, sorted by name ({} for older records)."""
    options = record.options or {}
    if not isinstance(options, dict):
        return {}
    defaults = option_defaults(record.backend)
    return {k: options[k] for k in sorted(options) if k not in defaults or options[k] != defaults[k]}


def backend_variant(record: Result) -> str | None:
    """The backend with its non-default options: `torch`, `tensorflow[keras=keras3]`, `torch[compile_mode=max-autotune]`.

    Two records that differ in options are different configurations: they are never pooled.
    """
    backend = record.backend
    options = backend_options(record)
    if backend is None or not options:
        return backend
    return f"{backend}[{','.join(f'{k}={v}' for k, v in options.items())}]"


# --------------------------------------------------------------------------- the configuration key
def record_params(record: Result) -> dict:
    """A record's params, with its workload's quiet defaults (`replicas: 1`) filled where an older
    record lacks them, so it matches the records made since."""
    params = record.params or {}

    quiet = getattr(WORKLOADS.get(record.workload), "quiet_defaults", None) or {}
    absent = {k: v for k, v in quiet.items() if k not in params}
    return {**params, **absent} if absent else params


def field_value(record: Result, name: str):
    """A record's value of a comparable field: a record field or a neutral parameter.

    `backend` is the backend with its non-default options (`tensorflow[keras=tf_keras]`).
    """
    if name == "backend":
        return backend_variant(record)
    if name in BY_FIELDS or name in KEY_FIELDS:
        return getattr(record, name, None)
    return record_params(record).get(name)


def match_key(record: Result, by: list[str]) -> tuple:
    """What a record is matched on when `by` is compared: every identifying field and parameter but
    the compared ones (and the fields linked to them); the backend's options with the backend."""
    freed = set(by)
    for name in by:
        freed.update(LINKED.get(name, ()))
    key = [(f, hashable(getattr(record, f, None))) for f in KEY_FIELDS if f not in freed]
    if "backend" not in freed:  # options belong to the backend: compared with it, else part of the match
        options = backend_options(record)
        if options:
            key.append(("options", hashable(options)))
    params = record_params(record)
    key += [(f"params.{k}", hashable(params[k])) for k in sorted(params) if k not in freed]
    return tuple(key)


def known_fields(records: list[Result]) -> list[str]:
    """Every field `--by` can name for these records."""
    params = sorted({k for r in records for k in record_params(r)})
    return list(BY_FIELDS) + params


def parse_by(values: Iterable[str]) -> list[str]:
    """`--by` values, repeatable and comma-separated, as one list without duplicates."""
    out: list[str] = []
    for value in values:
        for name in str(value).split(","):
            name = name.strip()
            if name and name not in out:
                out.append(name)
    return out


# --------------------------------------------------------------------------- the value of one process
def sample_values(record: Result, metric: str) -> list[float]:
    """A record's samples of the metric: its timed blocks for the headline, else its one value."""
    if metric == "median":
        samples = [float(s) for s in record.samples or [] if not missing(s)]
        if samples:
            return samples
    value = getattr(record, metric, None)
    return [] if missing(value) else [float(value)]


def process_value(record: Result, metric: str = "median") -> float | None:
    """The one sample a record (one worker process) gives a comparison: the median of its blocks, or its value."""
    values = sample_values(record, metric)
    return stats.median(values) if values else None
