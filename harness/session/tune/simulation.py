"""How often the race picks a configuration worse than the true fastest by more than the minimum effect.

Made-up frameworks of `configs` configurations, the true fastest at 1.0 and the others behind it by
gaps drawn from what the stored sweeps show (a third within 2%, a third 2-10% behind, a third 20-90%
behind); process values normal around the truth with a between-process CV drawn per configuration as in
docs/data (four in five steady, at 0.1-1%; one in five noisy, at 5-25%). The exhaustive sweep at the same
number of processes a configuration is scored the same way, so the two error rates sit side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.session.tune.race import Candidate, RaceRules, run_race
from harness.timing import stats


@dataclass(frozen=True)
class ErrorRate:
    """Wrong picks (more than the minimum effect behind the truth) of the race and the exhaustive sweep."""

    trials: int
    race_wrong: int
    exhaustive_wrong: int
    race_processes: float  # mean per trial
    exhaustive_processes: int
    disagree: int = 0  # trials where the two picks' true values differ by more than the minimum effect


def _truth(rng: np.random.Generator, configs: int) -> tuple[np.ndarray, np.ndarray]:
    kind = rng.integers(0, 3, size=configs - 1)
    gaps = np.where(kind == 0, rng.uniform(0.0, 0.02, configs - 1),
                    np.where(kind == 1, rng.uniform(0.02, 0.10, configs - 1), rng.uniform(0.2, 0.9, configs - 1)))
    means = np.concatenate([[1.0], 1.0 - gaps])
    cvs = np.where(rng.random(configs) < 0.8, rng.uniform(0.001, 0.01, configs), rng.uniform(0.05, 0.25, configs))
    return means, cvs


def simulate(trials: int, seed: int = 0, configs: int = 6, processes: int = 4,
             rules: RaceRules | None = None) -> ErrorRate:
    """The race and the exhaustive sweep on `trials` made-up frameworks (higher is better)."""
    rng = np.random.default_rng(seed)
    rules = rules or RaceRules(max_processes=processes)
    race_wrong = exhaustive_wrong = spent = disagree = 0
    for _ in range(trials):
        means, cvs = _truth(rng, configs)
        draws = {f"c{i}": list(np.maximum(rng.normal(means[i], cvs[i] * means[i], processes), 1e-6))
                 for i in range(configs)}
        taken = {name: 0 for name in draws}
        result = run_race([Candidate(name, "f") for name in draws], lambda names: _pop(draws, taken, names), rules)
        pick = int(result.standings[0].leader[1:])
        exhaustive = max(range(configs), key=lambda i: stats.median(draws[f"c{i}"]))
        threshold = 1.0 - rules.min_effect / 100.0
        race_wrong += bool(means[pick] < threshold)
        exhaustive_wrong += bool(means[exhaustive] < threshold)
        disagree += bool(abs(means[pick] / means[exhaustive] - 1.0) > rules.min_effect / 100.0)
        spent += result.processes
    return ErrorRate(trials, race_wrong, exhaustive_wrong, spent / trials, configs * processes, disagree)


def _pop(draws: dict[str, list[float]], taken: dict[str, int], names: list[str]) -> dict[str, float]:
    out = {}
    for name in names:
        out[name] = float(draws[name][taken[name]])
        taken[name] += 1
    return out
