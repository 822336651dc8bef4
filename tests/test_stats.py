"""The statistics of timing samples, pinned against values worked out by hand."""

import math

import numpy as np
import pytest

from harness.timing import stats


def normal(mean, rel_noise, n, seed):
    return list(mean * (1 + rel_noise * np.random.default_rng(seed).standard_normal(n)))


# ---------------------------------------------------------------- median, IQR, CV
def test_median_of_odd_and_even_lists():
    assert stats.median([3.0, 1.0, 2.0, 5.0, 4.0]) == 3.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5


def test_median_of_nothing_is_none():
    assert stats.median([]) is None


def test_iqr_uses_linear_interpolation():
    # 25th and 75th percentiles of 1..5 are 2 and 4
    assert stats.iqr([1, 2, 3, 4, 5]) == 2.0
    # of 1..4: 1.75 and 3.25
    assert stats.iqr([1, 2, 3, 4]) == pytest.approx(1.5)


def test_iqr_of_nothing_is_none_and_of_a_constant_is_zero():
    assert stats.iqr([]) is None
    assert stats.iqr([7.0, 7.0, 7.0]) == 0.0


def test_cv_of_1_2_3_is_one_half():
    # sample standard deviation 1, mean 2
    assert stats.cv([1, 2, 3]) == pytest.approx(0.5)


def test_cv_needs_two_samples_and_a_nonzero_mean():
    assert stats.cv([5.0]) is None
    assert stats.cv([]) is None
    assert stats.cv([-1.0, 1.0]) is None


def test_cv_is_scale_free():
    assert stats.cv([10, 20, 30]) == pytest.approx(stats.cv([1, 2, 3]))


# ---------------------------------------------------------------- bootstrap CI
def test_bootstrap_ci_contains_the_median():
    samples = normal(100.0, 0.02, 30, seed=1)
    low, high = stats.bootstrap_ci(samples)
    assert low <= stats.median(samples) <= high
    assert low < high


def test_bootstrap_ci_is_repeatable_with_the_seed():
    samples = normal(100.0, 0.02, 30, seed=2)
    assert stats.bootstrap_ci(samples, seed=7) == stats.bootstrap_ci(samples, seed=7)
    assert stats.bootstrap_ci(samples) == stats.bootstrap_ci(samples)


def test_bootstrap_ci_depends_on_the_seed():
    samples = normal(100.0, 0.02, 30, seed=2)
    assert stats.bootstrap_ci(samples, seed=1) != stats.bootstrap_ci(samples, seed=2)


def test_bootstrap_ci_narrows_with_more_samples():
    few = normal(100.0, 0.02, 10, seed=3)
    many = normal(100.0, 0.02, 1000, seed=3)
    width = lambda s: stats.bootstrap_ci(s)[1] - stats.bootstrap_ci(s)[0]  # noqa: E731
    assert width(many) < width(few) / 3


def test_bootstrap_ci_widens_with_the_confidence():
    samples = normal(100.0, 0.02, 50, seed=4)
    low90, high90 = stats.bootstrap_ci(samples, confidence=0.90)
    low99, high99 = stats.bootstrap_ci(samples, confidence=0.99)
    assert low99 <= low90 and high90 <= high99


def test_bootstrap_ci_of_one_sample_is_that_sample_and_of_none_is_none():
    assert stats.bootstrap_ci([42.0]) == (42.0, 42.0)
    assert stats.bootstrap_ci([]) == (None, None)


def test_ci_half_width_pct_is_half_the_interval_over_the_median():
    samples = normal(200.0, 0.01, 40, seed=5)
    low, high = stats.bootstrap_ci(samples)
    expected = 100.0 * (high - low) / 2 / stats.median(samples)
    assert stats.ci_half_width_pct(samples) == pytest.approx(expected)
    assert stats.ci_half_width_pct([]) is None


# ---------------------------------------------------------------- ratio CI, Mann-Whitney
def test_ratio_ci_is_the_ratio_of_medians_with_an_interval_around_it():
    a = normal(110.0, 0.005, 30, seed=6)
    b = normal(100.0, 0.005, 30, seed=7)
    ratio, low, high = stats.ratio_ci(a, b)
    assert ratio == pytest.approx(stats.median(a) / stats.median(b))
    assert ratio == pytest.approx(1.10, abs=0.01)
    assert low <= ratio <= high
    assert low > 1.0


def test_ratio_ci_is_repeatable_and_none_for_empty_or_zero_baseline():
    a, b = normal(1.0, 0.01, 20, seed=8), normal(1.0, 0.01, 20, seed=9)
    assert stats.ratio_ci(a, b) == stats.ratio_ci(a, b)
    assert stats.ratio_ci([], b) == (None, None, None)
    assert stats.ratio_ci(a, [0.0, 0.0]) == (None, None, None)


def test_mann_whitney_p_is_small_for_clearly_different_samples():
    p = stats.mann_whitney(normal(110.0, 0.01, 20, seed=10), normal(100.0, 0.01, 20, seed=11))
    assert p < 1e-6


def test_mann_whitney_p_is_one_for_identical_samples():
    samples = normal(100.0, 0.01, 20, seed=12)
    assert stats.mann_whitney(samples, list(samples)) == pytest.approx(1.0)


def test_mann_whitney_p_is_large_for_two_draws_of_one_distribution():
    assert stats.mann_whitney(normal(100.0, 0.01, 20, seed=13), normal(100.0, 0.01, 20, seed=14)) > 0.05


def test_mann_whitney_needs_two_samples_a_side():
    assert stats.mann_whitney([1.0], [1.0, 2.0]) is None


# ---------------------------------------------------------------- summarize
def test_summarize_fills_every_figure_and_no_warning_for_tight_samples():
    samples = normal(500.0, 0.005, 20, seed=15)
    summary = stats.summarize(samples)
    assert summary.n == 20
    assert summary.median == pytest.approx(np.median(samples))
    assert summary.iqr == pytest.approx(stats.iqr(samples))
    assert summary.ci_low <= summary.median <= summary.ci_high
    assert summary.cv == pytest.approx(stats.cv(samples))
    assert summary.warnings == ()


def test_summarize_warns_when_cv_exceeds_5_pct():
    summary = stats.summarize([1, 2, 3])
    assert summary.cv == pytest.approx(0.5)
    assert any("CV 50.0% exceeds 5%" in w for w in summary.warnings)


def test_summarize_does_not_warn_at_a_cv_just_under_5_pct():
    samples = [100.0, 104.9, 95.1]  # CV 4.9%
    assert stats.cv(samples) < 0.05
    assert stats.summarize(samples).warnings == ()


def test_summarize_warns_for_fewer_than_3_samples():
    summary = stats.summarize([10.0, 10.01])
    assert summary.n == 2
    assert any("too few" in w for w in summary.warnings)
    assert any("only 1 sample" in w for w in stats.summarize([10.0]).warnings)


def test_summarize_of_nothing_is_all_none_with_a_warning():
    summary = stats.summarize([])
    assert (summary.median, summary.iqr, summary.ci_low, summary.ci_high, summary.cv) == (None,) * 5
    assert summary.n == 0 and summary.warnings


def test_summarize_drops_missing_and_non_finite_samples():
    summary = stats.summarize([1.0, None, math.nan, math.inf, 2.0, 3.0])
    assert summary.n == 3
    assert summary.median == 2.0
