"""Statistics of timing samples: pure functions, no framework, no I/O."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

#: A record whose coefficient of variation exceeds this is flagged as too noisy to trust.
CV_WARN = 0.05
#: The significance level of every verdict: a difference is called when the Mann-Whitney p is below it.
VERDICT_ALPHA = 0.05
#: Fewer samples than this give no meaningful spread; such a record is flagged too.
MIN_SAMPLES = 3


def median(samples: Sequence[float]) -> float | None:
    """Median of the samples, or None when there are none."""
    return float(np.median(samples)) if len(samples) else None


def iqr(samples: Sequence[float]) -> float | None:
    """Interquartile range (75th minus 25th percentile, linear interpolation), or None when empty."""
    if not len(samples):
        return None
    q75, q25 = np.percentile(samples, [75, 25])
    return float(q75 - q25)


def cv(samples: Sequence[float]) -> float | None:
    """Coefficient of variation: sample standard deviation / mean; None for fewer than 2 samples."""
    if len(samples) < 2:
        return None
    arr = np.asarray(samples, dtype=float)
    mean = arr.mean()
    if mean == 0:
        return None
    return float(arr.std(ddof=1) / abs(mean))


def bootstrap_ci(
    samples: Sequence[float],
    *,
    statistic=np.median,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float | None, float | None]:
    """Percentile bootstrap confidence interval of `statistic` (default the median); seeded, so repeatable.

    One sample gives a degenerate interval at that sample; none gives (None, None).
    """
    arr = np.asarray(samples, dtype=float)
    if arr.size == 0:
        return None, None
    if arr.size == 1:
        return float(arr[0]), float(arr[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(resamples, arr.size))
    stats = statistic(arr[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(low), float(high)


def ci_half_width_pct(samples: Sequence[float], **kwargs) -> float | None:
    """Half the width of the bootstrap CI of the median, in percent of the median."""
    med = median(samples)
    low, high = bootstrap_ci(samples, **kwargs)
    if med in (None, 0) or low is None:
        return None
    return 100.0 * (high - low) / 2.0 / abs(med)


@dataclass(frozen=True)
class Summary:
    """The statistics of one run's samples, as the result record names them."""

    median: float | None
    iqr: float | None
    ci_low: float | None
    ci_high: float | None
    cv: float | None
    n: int
    warnings: tuple[str, ...]


def summarize(samples: Sequence[float], *, cv_warn: float = CV_WARN, min_samples: int = MIN_SAMPLES) -> Summary:
    """Median, IQR, bootstrap 95% CI of the median, CV, and the warnings a reader must see."""
    values = [float(s) for s in samples if s is not None and math.isfinite(s)]
    low, high = bootstrap_ci(values)
    spread = cv(values)
    warnings = []
    if len(values) < min_samples:
        warnings.append(f"only {len(values)} sample(s): too few to judge the spread (want >= {min_samples})")
    if spread is not None and spread > cv_warn:
        warnings.append(f"CV {spread:.1%} exceeds {cv_warn:.0%}: spread too wide to trust")
    return Summary(median(values), iqr(values), low, high, spread, len(values), tuple(warnings))


def mann_whitney(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided Mann-Whitney U test p-value of samples a against b; None when either is too small.

    scipy's `auto` method: the exact distribution when one side has at most 8 values and there are
    no ties (every comparison of a few processes), the normal approximation with tie correction
    otherwise; the same choice in scipy 1.9 and in current releases.
    """
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.stats import mannwhitneyu

    try:
        return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    except ValueError:
        return None


def min_p_value(n_a: int, n_b: int) -> float:
    """The smallest two-sided p-value an exact Mann-Whitney test of n_a against n_b values can give.

    It is reached when the two sides do not overlap at all: 2 / C(n_a + n_b, n_a) (capped at 1).
    3 against 3 can never go below 0.1, 4 against 4 below 0.029, 5 against 5 below 0.0079.
    """
    if n_a < 1 or n_b < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def processes_needed(alpha: float) -> int:
    """The fewest values per side (equal sides) with which a Mann-Whitney p below alpha is possible at all."""
    n = 1
    while min_p_value(n, n) >= alpha and n < 10_000:
        n += 1
    return n


def ratio_ci(
    a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float | None, float | None, float | None]:
    """Ratio of medians a/b with a bootstrap confidence interval (a and b resampled independently)."""
    arr_a = np.asarray(a, dtype=float)
    arr_b = np.asarray(b, dtype=float)
    if arr_a.size == 0 or arr_b.size == 0 or np.median(arr_b) == 0:
        return None, None, None
    point = float(np.median(arr_a) / np.median(arr_b))
    rng = np.random.default_rng(seed)
    ma = np.median(arr_a[rng.integers(0, arr_a.size, size=(resamples, arr_a.size))], axis=1)
    mb = np.median(arr_b[rng.integers(0, arr_b.size, size=(resamples, arr_b.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = ma / mb
    ratios = ratios[np.isfinite(ratios)]
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(ratios, [alpha, 1.0 - alpha])
    return point, float(low), float(high)


#: A fall of the rate from the first to the last timed block beyond this is reported as drift.
DRIFT_WARN = 0.05


def drift(samples: Sequence[float]) -> float | None:
    """Relative change from the first to the last sample ((last - first) / first); None for < 3 samples.

    A steady fall across timed blocks means the device slowed down while being measured
    (power or thermal throttling): the median is then a sustained figure, the first block a burst.
    """
    if len(samples) < 3 or not samples[0]:
        return None
    return float((samples[-1] - samples[0]) / samples[0])
