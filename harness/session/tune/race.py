"""The race: which configurations of a framework can still be its fastest, given the processes seen so far.

F-race (Birattari et al. 2002) and successive halving (Jamieson & Talwalkar 2016) measure every candidate
once and spend the next measurements only on those still in contention. Here a candidate is a
configuration, a measurement is one worker process (the unit every verdict of `compare` rests on), and a
candidate is dropped when even its best plausible value is worse than the leader's worst plausible value
by more than the minimum effect (and comes back if the leader's median later falls within that reach):

- measured once, its plausible interval is its value +/- z(1 - drop_alpha) x the prior between-process
  CV (the store's history of its kind of configuration, else `DEFAULT_PRIOR_CV`);
- measured n >= 2 times, its median +/- t(n-1, 1 - drop_alpha) x s / sqrt(n), s the processes' standard
  deviation (at least `FLOOR_CV` of the median: two processes that agree to the digit say little).

Between the leader and each survivor the verdict is compare's (`judge`: Mann-Whitney over processes, a
bootstrap CI of the ratio of medians, the 2% minimum effect): a survivor the leader beats is dropped with
that verdict, one "same within 2%" is a tie and stops being measured. A framework's race is decided when
the leader holds a verdict against every survivor with enough processes for one; until then the leader
and every undecided survivor get one more process a round, up to each one's limit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, List, Mapping, Optional, Sequence

from scipy.stats import norm, t

from harness.errors import InputError
from harness.results.compare.verdicts import (
    ALPHA,
    EQUIVALENT,
    FASTER,
    MIN_EFFECT_PCT,
    SLOWER,
    is_difference,
    judge,
)
from harness.timing import stats

#: The between-process CV assumed for a configuration measured once when the store has no history of its
#: kind: the 90th percentile of the CVs of the 133 GPU configurations with several processes in docs/data
#: (median 0.3%, pooled RMS 7.1%; TensorFlow's eager and GEMM steps reach 20-28%).
DEFAULT_PRIOR_CV = 0.10
#: The smallest between-process spread a configuration measured several times is credited with.
FLOOR_CV = 0.002
#: How a reason for a drop by the plausible intervals starts (such a drop is judged again each round).
OUT_OF_REACH = "out of reach"
#: One-sided probability that a bound of a plausible interval is passed by the configuration's true median.
DROP_ALPHA = 0.01


@dataclass(frozen=True)
class Candidate:
    """One configuration in a race: its name, its framework (the group it races in), its process values."""

    name: str
    group: str
    values: tuple[float, ...] = ()
    prior_cv: float | None = None  # None: the rules' prior
    limit: int | None = None  # the most processes it may get; None: the rules' max_processes


@dataclass(frozen=True)
class RaceRules:
    """The race's parameters (docs/tune.md, "Parameters")."""

    higher_is_better: bool = True
    min_effect: float = MIN_EFFECT_PCT
    alpha: float = ALPHA
    drop_alpha: float = DROP_ALPHA
    prior_cv: float = DEFAULT_PRIOR_CV
    floor_cv: float = FLOOR_CV
    max_processes: int = 10
    #: the verdict words of a value above and below its baseline; () for faster/slower by higher_is_better
    verdict_words: tuple[str, ...] = ()

    def __post_init__(self):
        if not 0 < self.drop_alpha < 0.5 or not 0 < self.alpha < 1:
            raise InputError("race: drop_alpha must lie in (0, 0.5) and alpha in (0, 1)", field="drop_alpha")
        if self.prior_cv < 0 or self.floor_cv < 0 or self.min_effect < 0:
            raise InputError("race: prior_cv, floor_cv and min_effect must be >= 0", field="prior_cv")
        if self.max_processes < 1:
            raise InputError(f"race: max_processes must be >= 1, got {self.max_processes}", field="max_processes")

    @property
    def words(self) -> tuple[str, str]:
        """Verdict words of a value above and below its baseline."""
        if self.verdict_words:
            return self.verdict_words[0], self.verdict_words[1]
        return (FASTER, SLOWER) if self.higher_is_better else (SLOWER, FASTER)


@dataclass(frozen=True)
class Pair:
    """The leader against one other survivor: compare's verdict of the other against the leader."""

    leader: str
    other: str
    ratio: float | None
    low: float | None
    high: float | None
    verdict: str

    @property
    def decided(self) -> bool:
        """Whether the verdict settles the pair: a difference, or "same within X%"."""
        return is_difference(self.verdict) or self.verdict.startswith(EQUIVALENT)


@dataclass(frozen=True)
class Standing:
    """One framework's race after a round: who leads, who is still in, who is out and why, what is next."""

    group: str
    leader: str | None
    survivors: tuple[str, ...]
    dropped: Mapping[str, str]
    pairs: tuple[Pair, ...]
    decided: bool
    measure_next: tuple[str, ...]
    bounds: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def undecided(self) -> tuple[str, ...]:
        """The survivors the leader holds no verdict against."""
        return tuple(p.other for p in self.pairs if not p.decided)


def plausible(values: Sequence[float], prior_cv: float, rules: RaceRules) -> tuple[float, float]:
    """The interval the configuration's true median plausibly lies in, from its process values."""
    center = stats.median(values)
    if len(values) == 1:
        half = norm.ppf(1 - rules.drop_alpha) * prior_cv * abs(center)
    else:
        spread = max(statistics.stdev(values), rules.floor_cv * abs(center))
        half = t.ppf(1 - rules.drop_alpha, len(values) - 1) * spread / math.sqrt(len(values))
    return center - half, center + half


def _out_of_reach(mine: tuple[float, float], leader: tuple[float, float], rules: RaceRules) -> bool:
    """Whether a configuration's best plausible value is worse than the leader's worst by over the minimum effect."""
    effect = rules.min_effect / 100.0
    if rules.higher_is_better:
        return mine[1] < leader[0] * (1 - effect)
    return mine[0] > leader[1] * (1 + effect)


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _leader(measured: list[Candidate], rules: RaceRules) -> Candidate:
    pick = max if rules.higher_is_better else min
    return pick(measured, key=lambda c: stats.median(c.values))


def stand(candidates: Sequence[Candidate], rules: RaceRules, dropped: Mapping[str, str] | None = None) -> list[Standing]:
    """Each framework's standing: earlier drops kept, new ones made by the rule, verdicts against the leader."""
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise InputError("race: configuration names must be unique", field="name")
    groups: dict[str, list[Candidate]] = {}
    for c in candidates:
        groups.setdefault(c.group, []).append(c)
    return [_stand_group(group, members, rules, dict(dropped or {})) for group, members in groups.items()]


def _stand_group(group: str, members: list[Candidate], rules: RaceRules, dropped: dict[str, str]) -> Standing:
    """One framework's standing (see `stand`)."""
    earlier = {c.name: dropped[c.name] for c in members if c.name in dropped}
    # what was out of reach is judged again each round, against the leader's median (not its interval, which
    # a second process can widen): a leader whose later processes fall brings back what its first (lucky)
    # one put out of reach; a failure, a memory cap or compare's verdict stands
    dropped = {name: why for name, why in earlier.items() if not why.startswith(OUT_OF_REACH)}
    alive = [c for c in members if c.name not in dropped]
    unmeasured = [c for c in alive if not c.values]
    measured = [c for c in alive if c.values]
    if not measured:
        return Standing(group, None, tuple(c.name for c in alive), dropped, (), False,
                        tuple(c.name for c in unmeasured if _room(c, rules)))
    bounds = {c.name: plausible(c.values, rules.prior_cv if c.prior_cv is None else c.prior_cv, rules)
              for c in measured}
    leader = _leader(measured, rules)
    middle = stats.median(leader.values)
    for c in measured:
        against = (middle, middle) if c.name in earlier else bounds[leader.name]
        if c is not leader and _out_of_reach(bounds[c.name], against, rules):
            edge = "best" if rules.higher_is_better else "lowest"
            dropped[c.name] = earlier.get(c.name) or (
                f"{OUT_OF_REACH} after {len(c.values)} of its processes: its {edge} plausible value "
                f"{_fmt(bounds[c.name][1 if rules.higher_is_better else 0])} is over {rules.min_effect:g}% behind "
                f"{leader.name}'s worst plausible {_fmt(bounds[leader.name][0 if rules.higher_is_better else 1])}")
    pairs = []
    for c in measured:
        if c is leader or c.name in dropped:
            continue
        j = judge(list(leader.values), list(c.values), rules.words, alpha=rules.alpha, min_effect=rules.min_effect)
        pair = Pair(leader.name, c.name, j.ratio, j.low, j.high, j.verdict)
        if is_difference(j.verdict):
            dropped[c.name] = f"{j.verdict} than {leader.name} ({100 * (j.ratio - 1):+.1f}%, compare's verdict)"
        pairs.append(pair)
    survivors = tuple(c.name for c in alive if c.name not in dropped)
    open_pairs = [p for p in pairs if not p.decided]
    enough = len(leader.values) >= stats.processes_needed(rules.alpha)
    decided = not unmeasured and not open_pairs and enough
    wanted = [] if decided else [leader, *unmeasured, *(c for c in measured if c.name in {p.other for p in open_pairs})]
    return Standing(group, leader.name, survivors, dropped, tuple(pairs), decided,
                    tuple(c.name for c in wanted if _room(c, rules)), bounds)


def _room(c: Candidate, rules: RaceRules) -> bool:
    """Whether a configuration may have one more process."""
    return len(c.values) < (rules.max_processes if c.limit is None else min(c.limit, rules.max_processes))


#: Measures the named configurations once more: their new process values (a name left out gave none: it failed).
Measure = Callable[[List[str]], Mapping[str, Optional[float]]]  # typing's names: Python 3.9 evaluates this line


@dataclass
class RaceResult:
    """A finished race: the last standing of each framework, every candidate's values, rounds and processes run."""

    standings: list[Standing]
    candidates: dict[str, Candidate]
    rounds: int
    processes: int
    stopped: str | None = None  # why it stopped before every race was decided ("time limit", ...)


def run_race(candidates: Sequence[Candidate], measure: Measure, rules: RaceRules,
             stop: Callable[[], str | None] = lambda: None) -> RaceResult:
    """Race until every framework is decided, nothing may be measured any more, or `stop` names a reason."""
    pool = {c.name: c for c in candidates}
    dropped: dict[str, str] = {}
    rounds = processes = 0
    while True:
        standings = stand(list(pool.values()), rules, dropped)
        dropped = {name: why for s in standings for name, why in s.dropped.items()}
        wanted = [name for s in standings for name in s.measure_next]
        reason = stop() if wanted else None
        if not wanted or reason:
            return RaceResult(standings, pool, rounds, processes, reason)
        got = measure(wanted)
        rounds += 1
        for name in wanted:
            value = got.get(name)
            processes += 1
            if value is None or not math.isfinite(value):
                dropped[name] = "its process gave no value (failed or unsupported)"
            else:
                c = pool[name]
                pool[name] = Candidate(c.name, c.group, (*c.values, float(value)), c.prior_cv, c.limit)
