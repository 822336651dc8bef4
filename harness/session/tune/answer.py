"""The answer of a race: per framework its fastest configuration, the runner-up and the verdict between them;
the frameworks' bests against one another; what was left undecided, what was dropped and why; the cost."""

from __future__ import annotations

from itertools import combinations

from harness.results.compare.verdicts import judge
from harness.session.tune.race import Candidate, RaceRules, Standing
from harness.timing import stats


def _figure(c: Candidate) -> dict:
    low, high = stats.bootstrap_ci(list(c.values)) if len(c.values) >= 2 else (None, None)
    return {"configuration": c.name, "figure": stats.median(c.values), "interval": [low, high],
            "processes": len(c.values)}


def _framework(s: Standing, pool: dict[str, Candidate], rules: RaceRules) -> dict:
    """One framework's part of the answer."""
    if s.leader is None:
        return {"framework": s.group, "best": None, "runner_up": None, "decided": False, "undecided": [],
                "dropped": _dropped(s, pool)}
    leader = pool[s.leader]
    others = [pool[n] for n in pool if pool[n].group == s.group and n != s.leader and pool[n].values]
    pick = max if rules.higher_is_better else min
    runner = pick(others, key=lambda c: stats.median(c.values)) if others else None
    runner_up = None
    if runner is not None:
        j = judge(list(leader.values), list(runner.values), rules.words, alpha=rules.alpha,
                  min_effect=rules.min_effect)
        runner_up = {**_figure(runner), "ratio": j.ratio, "ci": [j.low, j.high], "verdict": j.verdict}
    return {"framework": s.group, "best": _figure(leader), "runner_up": runner_up, "decided": s.decided,
            "undecided": list(s.undecided), "ties": [p.other for p in s.pairs if p.decided and p.other in s.survivors],
            "dropped": _dropped(s, pool)}


def _dropped(s: Standing, pool: dict[str, Candidate]) -> list[dict]:
    return [{"configuration": name, "processes": len(pool[name].values),
             "figure": stats.median(pool[name].values) if pool[name].values else None, "reason": reason}
            for name, reason in s.dropped.items()]


def race_answer(standings: list[Standing], candidates: list[Candidate], rules: RaceRules, *, metric: str,
                unit: str | None, cost: dict) -> dict:
    """The answer as a JSON-ready dict (docs/tune.md, "The answer")."""
    pool = {c.name: c for c in candidates}
    frameworks = [_framework(s, pool, rules) for s in standings]
    between = []
    bests = [f for f in frameworks if f["best"]]
    bests.sort(key=lambda f: f["best"]["figure"], reverse=rules.higher_is_better)
    for a, b in combinations(bests, 2):
        j = judge(list(pool[a["best"]["configuration"]].values), list(pool[b["best"]["configuration"]].values),
                  rules.words, alpha=rules.alpha, min_effect=rules.min_effect)
        between.append({"baseline": a["framework"], "other": b["framework"], "ratio": j.ratio, "ci": [j.low, j.high],
                        "p_value": j.p_value, "verdict": j.verdict})
    return {"metric": metric, "unit": unit, "higher_is_better": rules.higher_is_better,
            "rules": {"min_effect_pct": rules.min_effect, "alpha": rules.alpha, "drop_alpha": rules.drop_alpha,
                      "prior_cv": rules.prior_cv, "floor_cv": rules.floor_cv},
            "frameworks": frameworks, "between_frameworks": between, "cost": cost}
