"""The verdict of one comparison row: faster, slower, no difference found, or inconclusive and why.

Pure functions of the processes' counts, the ratio, its CI and the p-value (README, "Statistics").
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.timing import stats

#: A difference is significant when the Mann-Whitney p-value over processes is below this.
ALPHA = stats.VERDICT_ALPHA
#: The smallest change (in percent of the baseline) called faster or slower; `--min-effect` changes it.
MIN_EFFECT_PCT = 2.0

FASTER, SLOWER, SAME = "faster", "slower", "no difference found"
#: The start of the equivalence verdict, "same within 2%": the ratio's CI over processes lies wholly inside
#: 1 +/- the minimum effect. Everything that sorts verdicts treats it as no difference.
EQUIVALENT = "same within"
#: Kept for callers of older versions: a row whose sides gave no value at all (not produced any more).
UNTESTED = "not tested: too few samples"
#: Every verdict that is neither a difference nor its absence starts with this.
INCONCLUSIVE = "inconclusive"

#: metric name -> (higher is better, verdict words for higher/lower). `median` is the headline, on raw samples.
METRICS: dict[str, tuple[bool | None, tuple[str, str]]] = {
    "median": (None, (FASTER, SLOWER)),
    "tflops": (True, (FASTER, SLOWER)),
    "pct_of_peak": (True, (FASTER, SLOWER)),
    "step_time_s": (False, (SLOWER, FASTER)),
    "first_step_s": (False, (SLOWER, FASTER)),
    "peak_allocated_bytes": (False, ("more", "less")),
    "device_used_bytes": (False, ("more", "less")),
    "host_peak_rss_bytes": (False, ("more", "less")),
    "energy_j": (False, ("more", "less")),
    "avg_power_w": (False, ("more", "less")),
}


def higher_is_better(metric: str, unit: str | None) -> bool:
    """Whether a higher value of the metric is the better one; for the headline, from its unit."""
    higher, _ = METRICS[metric]
    if higher is not None:
        return higher
    # the headline: a rate (images/s, TFLOP/s) is higher-better; a time is lower-better
    unit = (unit or "").strip().lower()
    return not (unit in ("s", "ms", "us", "ns") or unit.startswith("s/") or unit.endswith("seconds"))


def verdict_words(metric: str, unit: str | None) -> tuple[str, str]:
    """The verdicts of a value above and below its baseline (faster/slower, slower/faster, more/less)."""
    words = METRICS[metric][1]
    if not higher_is_better(metric, unit) and metric == "median":
        words = (SLOWER, FASTER)
    return words


def plural(n: int) -> str:
    """`1 process`, `n processes`."""
    return f"{n} process" + ("" if n == 1 else "es")


def inconclusive_reason(n_base: int, n_value: int, alpha: float = ALPHA) -> str | None:
    """Why n_base against n_value processes cannot give a verdict at alpha; None when they can.

    An exact Mann-Whitney test cannot go below 2 / C(n_base + n_value, n_base), reached when the
    sides do not overlap at all: with 3 processes a side that is 0.1, so no p < 0.05 can exist.
    """
    if stats.min_p_value(n_base, n_value) < alpha:
        return None
    need = stats.processes_needed(alpha)
    sides = f"{plural(n_base)} per side" if n_base == n_value else f"{n_base} against {plural(n_value)}"
    return f"{INCONCLUSIVE}: {sides} cannot reach p < {alpha:g}; use at least {need}" + (
        "" if n_base == n_value else " per side")


def equivalent(min_effect: float) -> str:
    """The equivalence verdict for a minimum effect in percent: `same within 2%`."""
    return f"{EQUIVALENT} {min_effect:g}%"


def verdict(n_base: int, n_value: int, ratio, low, high, p_value, words: tuple[str, str],
            alpha: float, min_effect: float) -> str:
    """The verdict of value against baseline: `words` (higher, lower) only with enough processes,
    p < alpha, a CI (low, high) that excludes 1 and a change of at least min_effect percent; "same within
    X%" (equivalent) when, with as many processes, that CI lies wholly inside 1 +/- min_effect percent.
    `low`/`high` must be a CI over processes (None otherwise): no verdict rests on one process's blocks."""
    if ratio is None:
        return UNTESTED
    reason = inconclusive_reason(n_base, n_value, alpha)
    if reason:
        return reason
    if p_value is None or low is None or high is None:
        return f"{INCONCLUSIVE}: the processes gave no p-value"
    change = 100.0 * (ratio - 1.0)
    differs = p_value < alpha and not (low <= 1.0 <= high)
    if differs and abs(change) >= min_effect:
        return words[0] if ratio > 1.0 else words[1]
    bound = min_effect / 100.0
    if min_effect > 0 and 1.0 - bound < low and high < 1.0 + bound:
        return equivalent(min_effect)
    if differs:
        return f"{SAME}: {change:+.1f}% is under the {min_effect:g}% minimum effect"
    return SAME


@dataclass(frozen=True)
class Judgement:
    """A comparison of two sides' process values: ratio of medians, its bootstrap CI over processes, the
    Mann-Whitney p-value and the verdict."""

    ratio: float | None
    low: float | None
    high: float | None
    p_value: float | None
    verdict: str


def judge(base: list[float], value: list[float], words: tuple[str, str] = (FASTER, SLOWER), *,
          alpha: float = ALPHA, min_effect: float = MIN_EFFECT_PCT) -> Judgement:
    """The verdict of `value` against `base`, one value per process on each side (compare's rule for every row
    whose CI is over processes). Needs at least 2 processes a side for a CI and a p-value."""
    median_base = stats.median(base)
    ratio = stats.median(value) / median_base if median_base else None
    low = high = None
    if len(base) >= 2 and len(value) >= 2:
        _, low, high = stats.ratio_ci(value, base)
    p_value = stats.mann_whitney(value, base)
    return Judgement(ratio, low, high, p_value,
                     verdict(len(base), len(value), ratio, low, high, p_value, words, alpha, min_effect))


def is_difference(verdict) -> bool:
    """Whether a verdict says the two sides differ (faster/slower, more/less), not that no difference was found."""
    return isinstance(verdict, str) and not verdict.startswith((SAME, EQUIVALENT, INCONCLUSIVE, UNTESTED))
