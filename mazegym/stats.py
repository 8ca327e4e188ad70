"""How far a rate measured on a finite set can be trusted: the Wilson score interval of a solve rate.

A solve rate on 64 mazes moves by 1.6 points per maze, and 61/64 is compatible with any true rate from about 87% to
98%: every table that prints a solve rate prints this interval beside it, so a one-maze difference is not read as a
result.
"""

from __future__ import annotations

import math
import statistics

Z95 = 1.959963984540054
"""The standard normal quantile of a two-sided 95% interval."""


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (95% by default) of the rate ``successes / trials``: ``(low, high)`` in [0, 1].

    It is the set of rates p for which the observed rate lies within ``z`` standard errors ``sqrt(p (1 - p) / n)``
    (Wilson 1927); unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n successes, which
    is where the project's solve rates end up. ``trials == 0`` gives ``(0.0, 1.0)``: nothing is known.
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return 0.0, 1.0
    p, z2 = successes / trials, z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z / (1 + z2 / trials) * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials))
    # at 0 and n successes the ends are exactly 0 and 1; the subtraction would leave rounding error there
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def format_interval(successes: int, trials: int, digits: int = 1) -> str:
    """The 95% Wilson interval of ``successes / trials`` in percent, as tables print it: ``"87.1-98.4%"``."""
    low, high = wilson_interval(successes, trials)
    return f"{100 * low:.{digits}f}-{100 * high:.{digits}f}%"


_T975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622, 10: 2.2281}
"""Student's t quantile of a two-sided 95% interval for 1-10 degrees of freedom (standard tables)."""


def t_quantile_95(df: int) -> float:
    """Student's t quantile of a two-sided 95% interval with ``df`` degrees of freedom: the table for 1-10, past it
    the Cornish-Fisher expansion around the normal quantile (within 0.001 of the exact value)."""
    if df < 1:
        raise ValueError(f"need df >= 1, got {df}")
    if df in _T975:
        return _T975[df]
    z = Z95
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def mean_interval(values: list[float], low: float = 0.0, high: float = 1.0) -> tuple[float, float] | None:
    """The 95% Student-t interval of the mean of ``values`` (e.g. one solve rate per seed), clipped to
    ``[low, high]``; None for fewer than two values. Over 3 seeds it is mean +- 2.48 x their standard deviation:
    wide, which is what 3 seeds can say."""
    n = len(values)
    if n < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile_95(n - 1) * statistics.stdev(values) / math.sqrt(n)
    return max(low, mean - half), min(high, mean + half)
