"""The race replayed on a store's recorded processes, against the exhaustive answer over all of them.

Each configuration's processes are drawn in a random order (one order a seed), as if the race had run
them; a configuration can get no more processes than the store holds. The exhaustive answer is compare's
over every process: per framework the configuration with the best median, and compare's verdict of the
race's pick against it. The race is right when it picks the same configuration or one the exhaustive
verdict calls "same within 2%".
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from harness.results.compare import (
    EQUIVALENT,
    backend_variant,
    load_records,
    ok_records,
    process_value,
    record_params,
)
from harness.results.compare.records import hashable
from harness.results.compare.verdicts import higher_is_better, judge
from harness.session.tune.live import history_priors, kind_of
from harness.session.tune.race import Candidate, RaceRules, run_race
from harness.timing import stats


@dataclass(frozen=True)
class Configuration:
    """A configuration of a store: its name, framework and every recorded process value."""

    name: str
    group: str
    values: tuple[float, ...]
    durations: tuple[float, ...] = ()  # each process's run time in seconds (its record's duration_s)
    kind: tuple = ()  # what its prior is looked up by (harness.session.tune.live.kind_of)


def configurations(records, metric: str = "median") -> tuple[list[Configuration], bool]:
    """A store's configurations with their process values, and whether higher values are better."""
    records = [r for r in ok_records(records) if process_value(r, metric) is not None]
    keys: dict[tuple, list] = {}
    for r in records:
        keys.setdefault((r.workload, r.backend, backend_variant(r), r.device, hashable(record_params(r))), []).append(r)
    varying = {k for k in {k for r in records for k in record_params(r)}
               if len({hashable(record_params(r).get(k)) for r in records}) > 1}
    several = {"workload": len({k[0] for k in keys}) > 1, "device": len({k[3] for k in keys}) > 1}
    out = []
    for (workload, backend, variant, device, _), rs in keys.items():
        params = record_params(rs[0])
        parts = [f"{k}={params[k]}" for k in sorted(varying) if k in params]
        parts = ([f"device={device}"] if several["device"] else []) + parts
        group = f"{backend} on {workload}" if several["workload"] else backend
        out.append(Configuration(" ".join([variant, *parts]), group, tuple(process_value(r, metric) for r in rs),
                                 tuple(r.duration_s or 0.0 for r in rs), kind_of(rs[0])))
    higher = higher_is_better(metric, records[0].unit if records else None)
    return out, higher


def exhaustive_best(configs: list[Configuration], higher: bool) -> dict[str, Configuration]:
    """Per framework, the configuration with the best median over all its processes."""
    best: dict[str, Configuration] = {}
    for c in configs:
        held = best.get(c.group)
        if held is None or (stats.median(c.values) > stats.median(held.values)) == higher and \
                stats.median(c.values) != stats.median(held.values):
            best[c.group] = c
    return best


@dataclass(frozen=True)
class Replay:
    """One replay: per framework whether the race's pick matches the exhaustive answer, and the processes."""

    seed: int
    picks: dict  # group -> (race's pick, exhaustive best, verdict of the pick against the best, equal?)
    processes: int
    exhaustive: int
    undecided: tuple[str, ...]
    run_time_s: float = 0.0  # the run time of the processes the race drew
    exhaustive_run_time_s: float = 0.0

    @property
    def equal(self) -> bool:
        """Whether every framework's pick matches the exhaustive answer."""
        return all(p[3] for p in self.picks.values())


def replay(configs: list[Configuration], higher: bool, seed: int, rules: RaceRules | None = None,
           priors: dict[tuple, float] | None = None) -> Replay:
    """The race over these configurations' recorded processes drawn in the order `seed` gives; `priors`: the
    between-process CV by kind of configuration (from other stores), else the rules' default."""
    rng = random.Random(seed)
    order = {c.name: rng.sample(range(len(c.values)), len(c.values)) for c in configs}
    by_name = {c.name: c for c in configs}
    spent: list[float] = []
    limit = max(len(c.values) for c in configs)
    rules = rules or RaceRules(higher_is_better=higher, max_processes=limit)

    def measure(names):
        drawn = {name: order[name].pop(0) for name in names}
        spent.extend(by_name[n].durations[i] if by_name[n].durations else 0.0 for n, i in drawn.items())
        return {name: by_name[name].values[i] for name, i in drawn.items()}

    result = run_race([Candidate(c.name, c.group, prior_cv=(priors or {}).get(c.kind), limit=len(c.values))
                       for c in configs], measure, rules)
    picks = {}
    for group, best in exhaustive_best(configs, higher).items():
        standing = next(s for s in result.standings if s.group == group)
        pick = by_name[standing.leader]
        verdict = "the same configuration" if pick is best else judge(
            list(best.values), list(pick.values), rules.words, alpha=rules.alpha, min_effect=rules.min_effect).verdict
        picks[group] = (pick.name, best.name, verdict, pick is best or verdict.startswith(EQUIVALENT))
    undecided = tuple(f"{s.leader} vs {o}" for s in result.standings for o in s.undecided)
    return Replay(seed, picks, result.processes, sum(len(c.values) for c in configs), undecided, sum(spent),
                  sum(sum(c.durations) for c in configs))


def replay_store(path: str, seeds: int = 20, metric: str = "median", history: list[str] = ()) -> list[Replay]:
    """The race replayed on a store under seeds 0..seeds-1; `history`: other stores whose configurations of
    the same kind give the priors (as a live session's store history would), else the default prior."""
    configs, higher = configurations(load_records(path), metric)
    priors = history_priors([r for h in history for r in load_records(h)], metric) if history else None
    return [replay(configs, higher, seed, priors=priors) for seed in range(seeds)]
