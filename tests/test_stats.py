"""The 95% Wilson score interval of a solve rate, against values worked out by hand."""

import math

import pytest

from mazegym.stats import Z95, format_interval, wilson_interval


@pytest.mark.parametrize(
    "solved, trials, low, high",
    [
        # (k/n - p)^2 = z^2 p (1 - p) / n solved for p, z = 1.96: the interval's two ends
        (61, 64, 0.8710, 0.9839),
        (32, 64, 0.3810, 0.6190),
        (0, 64, 0.0, 0.0566),  # nothing solved: the upper end is z^2 / (n + z^2)
        (64, 64, 0.9434, 1.0),
        (1, 2, 0.0945, 0.9055),
    ],
)
def test_wilson_interval_by_hand(solved, trials, low, high):
    lo, hi = wilson_interval(solved, trials)
    assert (lo, hi) == (pytest.approx(low, abs=5e-5), pytest.approx(high, abs=5e-5))
    assert 0.0 <= lo <= solved / trials <= hi <= 1.0
    for p in (lo, hi):  # each end is a rate the observed one lies exactly z standard errors from
        if 0.0 < p < 1.0:
            assert abs(solved / trials - p) == pytest.approx(Z95 * math.sqrt(p * (1 - p) / trials))


def test_edges_and_format():
    assert wilson_interval(0, 64)[0] == 0.0 and wilson_interval(64, 64)[1] == 1.0
    assert wilson_interval(0, 64)[1] == pytest.approx(Z95**2 / (64 + Z95**2))
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert format_interval(61, 64) == "87.1-98.4%"
    lo, hi = wilson_interval(20, 64)
    assert (1 - hi, 1 - lo) == (pytest.approx(wilson_interval(44, 64)[0]), pytest.approx(wilson_interval(44, 64)[1]))
    for bad in ((65, 64), (-1, 64), (0, -1)):
        with pytest.raises(ValueError):
            wilson_interval(*bad)


def test_t_quantiles_match_the_tables():
    from mazegym.stats import t_quantile_95

    # two-sided 95% Student-t quantiles from standard tables
    for df, t in ((1, 12.706), (2, 4.303), (3, 3.182), (10, 2.228), (11, 2.201), (15, 2.131), (30, 2.042)):
        assert t_quantile_95(df) == pytest.approx(t, abs=1e-3)
    assert t_quantile_95(10_000) == pytest.approx(1.960, abs=1e-3)
    with pytest.raises(ValueError):
        t_quantile_95(0)


def test_mean_interval_over_three_seeds_by_hand():
    from mazegym.stats import mean_interval

    # 0.5, 0.75, 1.0: mean 0.75, sd 0.25, half-width 4.3027 * 0.25 / sqrt(3) = 0.62104; clipped to [0, 1]
    low, high = mean_interval([0.5, 0.75, 1.0])
    assert (low, high) == pytest.approx((0.12896, 1.0), abs=1e-5)
    assert mean_interval([0.9, 0.9, 0.9]) == pytest.approx((0.9, 0.9))
    assert mean_interval([0.5]) is None
    assert mean_interval([-1.0, 1.0], low=float("-inf"), high=float("inf")) == pytest.approx(
        (-12.706, 12.706), abs=1e-3
    )
