"""A tuning session through the application layer: prepared like `run`'s (nothing written before it starts),
run by `run_session` with the race's rounds, answered from the session's records.

    tuned = prepare_tune(SessionRequest(scenario_file="frameworks"), TuneSettings(max_processes=6))
    finished, answer = run_tune(tuned, observer)
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, replace

from harness.errors import InputError
from harness.results.compare.verdicts import METRICS, higher_is_better, verdict_words
from harness.results.record import Result
from harness.results.store import open_store, parse_location, store_exists
from harness.session.app import (
    FinishedSession,
    PreparedSession,
    SessionObserver,
    prepare_session,
    run_session,
)
from harness.session.limits import parse_size
from harness.session.request import SessionRequest
from harness.session.tune.answer import race_answer
from harness.session.tune.live import RaceRounds, history_priors
from harness.session.tune.race import RaceRules
from harness.workloads import WORKLOADS


@dataclass(frozen=True)
class TuneSettings:
    """What `tune` adds to `run`'s request: the figure raced on, the most processes a configuration gets
    (default: as many as the exhaustive plan gives it), and the device memory a configuration may use (a size,
    e.g. 24GiB)."""

    metric: str = "median"
    max_processes: int | None = None
    max_device_memory: str | None = None


@dataclass(frozen=True)
class PreparedTune:
    """A tuning session ready to run: the session (one process a configuration) with the race as its rounds,
    and the processes the exhaustive sweep of the same scenario would plan."""

    prepared: PreparedSession
    rounds: RaceRounds
    exhaustive_processes: int


def _device_memory(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except InputError as exc:
        raise InputError(str(exc).replace("--memory-limit", "--max-device-memory"),
                         field="--max-device-memory") from None


def _stored(store_path: str) -> list[Result]:
    location = parse_location(store_path)
    if not store_exists(location):
        return []
    with open_store(location, readonly=True) as store:
        return store.results()


def prepare_tune(request: SessionRequest, settings: TuneSettings,
                 observer: SessionObserver | None = None) -> PreparedTune:
    """The tuning session of a scenario (or the stored one `request.resume` names, with its scenario given
    again); InputError for bad input, before anything is written."""
    if settings.metric not in METRICS:
        raise InputError(f"--metric {settings.metric!r}: expected one of {', '.join(METRICS)}", field="--metric")
    if settings.max_processes is not None and settings.max_processes < 1:
        raise InputError(f"--max-processes {settings.max_processes}: expected at least 1", field="--max-processes")
    if not request.scenario_file:
        raise InputError("missing SCENARIO_FILE (tune --resume SESSION needs the scenario it tuned as well)",
                         field="SCENARIO_FILE")
    max_device_memory = _device_memory(settings.max_device_memory)
    exhaustive = prepare_session(replace(request, resume=None))
    # a resumed session runs its own stored plan: the scenario and its shaping flags gave only the configurations
    racing = (replace(request, scenario_file=None, overrides=(), backends=(), devices=(), documents=())
              if request.resume else
              replace(request, overrides=(*request.overrides, "measure.processes=1")))
    prepared = prepare_session(racing, observer)
    configurations = [replace(s, session_id=prepared.session_id, replicate=0)
                      for s in {s.run_key: s for s in exhaustive.plan}.values()]
    # the processes the exhaustive plan gives each configuration (auto: its least)
    planned = Counter(spec.run_key for spec in exhaustive.plan)
    limits = {s.run_key: settings.max_processes or planned[s.run_key] for s in configurations}
    unit = getattr(WORKLOADS.get(configurations[0].workload), "unit", None) if configurations else None
    rules = RaceRules(higher_is_better=higher_is_better(settings.metric, unit),
                      max_processes=max(limits.values(), default=1),
                      verdict_words=verdict_words(settings.metric, unit))
    stored = [r for r in _stored(prepared.store_path) if r.session_id != prepared.session_id]
    rounds = RaceRounds(configurations, rules, settings.metric, max_device_memory, history_priors(stored, settings.metric),
                        limits, seed=int(configurations[0].seed or 0) if configurations else 0)
    return PreparedTune(replace(prepared, rounds=rounds), rounds, len(exhaustive.plan))


def run_tune(tuned: PreparedTune, observer: SessionObserver | None = None) -> tuple[FinishedSession, dict]:
    """Run the tuning session and answer from every record it has (those of earlier calls included)."""
    started = time.monotonic()
    finished = run_session(tuned.prepared, observer)
    elapsed = time.monotonic() - started
    records = [r for r in _stored(tuned.prepared.store_path)
               if r.session_id == tuned.prepared.session_id and not r.probe_of] or list(finished.records)
    standings, candidates = tuned.rounds.standings(records)
    unit = next((r.unit for r in records if r.status == "ok"), None) if tuned.rounds.metric == "median" \
        else tuned.rounds.metric
    cost = {"processes": len(records), "exhaustive_processes": tuned.exhaustive_processes,
            "configurations": len(tuned.rounds.configurations),
            "run_time_s": sum(r.duration_s or 0.0 for r in records), "wall_time_s": elapsed,
            "session_id": tuned.prepared.session_id, "store": tuned.prepared.store_path}
    answer = race_answer(standings, candidates, tuned.rounds.rules, metric=tuned.rounds.metric, unit=unit, cost=cost)
    return finished, answer
