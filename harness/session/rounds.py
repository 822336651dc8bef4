"""As many processes as the answer needs (`measure.processes: auto`): after the planned rounds, more rounds for
the configurations whose median over processes is not yet known closely enough.

The rule looks at one configuration's own samples only (their spread), never at another configuration's, so
it cannot steer a comparison towards a verdict: the A/A simulation in the tests holds its false-verdict rate
at or under 5%. Each added round is shuffled like the planned ones (harness.session.plan), so drift still
falls on every configuration alike.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, replace

from harness.results.record import Result
from harness.seam.runspec import RunSpec, new_id
from harness.timing import stats
from harness.timing.settings import AUTO, Measure

#: How far beyond `max_processes` a configuration's CI may be expected to reach its target and still get more
#: processes: the 1/sqrt(n) rule is rough over a few processes, and a configuration a little short of its target
#: at its most still gains from them; one that would need many times its most (processes 20% apart) does not.
REACH = 4


def wants_another(medians: list[float], attempts: int, measure: Measure) -> bool:
    """Whether a configuration with these ok process medians after `attempts` processes (failed ones included)
    gets one more: `processes: auto` only, fewer than its most, at least 2 ok processes (a configuration that
    fails is not chased), and either fewer ok ones than its least or a 95% CI of the median over processes
    wider than +/- process_ci_pct percent that its most can still bring within it.

    A CI narrows about as 1/sqrt(processes): one of half-width h after n processes reaches the target t at
    about n (h / t)^2. Where that is far beyond `max_processes` (REACH times it: a configuration whose processes
    differ by 20%, say), more processes would be spent without coming near it: the configuration stops, and
    its spread is what its records and the comparison's CI show."""
    if measure.processes != AUTO:
        return False
    least, most = measure.process_bounds()
    if attempts >= most or len(medians) < 2:
        return False
    if len(medians) < least:
        return True
    half, target = stats.ci_half_width_pct(medians), measure.process_ci_pct
    if half is None:
        return True
    return target < half and len(medians) * (half / target) ** 2 <= REACH * most


@dataclass
class AdaptiveRounds:
    """The next round of a session with `processes: auto` configurations, from the results it has so far.

    `configurations`: one spec per configuration of the session (any replicate); `limit`: the most runs the
    session may have in all (--max-runs), planned and added; `planned`: the runs planned before any round was
    added (the session's stored plan).
    """

    configurations: list[RunSpec]
    seed: int
    planned: int
    limit: int | None = None
    rounds: int = 0
    added: int = 0

    @classmethod
    def of(cls, plan: list[RunSpec], *, planned: int, limit: int | None = None) -> "AdaptiveRounds | None":
        """The rounds of a plan, or None when no configuration in it has `processes: auto`."""
        configurations = list({spec.run_key: spec for spec in plan if spec.measure.processes == AUTO}.values())
        if not configurations:
            return None
        return cls(configurations, seed=int(configurations[0].seed or 0), planned=planned, limit=limit)

    def next_round(self, results: list[Result]) -> list[RunSpec]:
        """One more process of each configuration that wants another (wants_another), in a seeded shuffled
        order; empty when none does or the session is at its limit."""
        by_key: dict[str, list[Result]] = defaultdict(list)
        for result in results:
            if not result.probe_of:
                by_key[result.run_key].append(result)
        wanted = []
        for spec in self.configurations:
            done = by_key[spec.run_key]
            medians = [r.median for r in done if r.status == "ok" and isinstance(r.median, (int, float))]
            if wants_another(medians, len(done), spec.measure):
                wanted.append(replace(spec, run_id=new_id(), replicate=len(done)))
        self.rounds += 1
        random.Random(self.seed * 1_000_003 + self.rounds).shuffle(wanted)
        room = None if self.limit is None else self.limit - self.planned - self.added
        if room is not None:  # the limit cuts a shuffled round: which configurations lose out is left to chance
            wanted = wanted[:max(0, room)]
        self.added += len(wanted)
        return wanted
