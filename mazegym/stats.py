"""How far a rate measured on a finite set can be trusted: the Wilson score interval of a solve rate.

A solve rate on 64 mazes moves by 1.6 points per maze, and 61/64 is compatible with any true rate from about 87% to
98%: every table that prints a solve rate prints this interval beside it, so a one-maze difference is not read as a
result.
"""

from __future__ import annotations

import math

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
