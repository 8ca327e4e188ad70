"""Statistics of a benchmark whose unit of replication is the run (one seed of one algorithm on one track).

Agarwal et al., "Deep RL at the Edge of the Statistical Precipice" (NeurIPS 2021), as ``rliable`` computes it:

* a score matrix per algorithm is ``runs x tracks`` (final greedy solve rates in [0, 1]);
* the **IQM** is the mean of the middle 50% of all its entries (``scipy.stats.trim_mean``, 25% cut at each end);
* intervals are **stratified bootstrap** percentile intervals: each replicate resamples the runs of every track
  independently, with replacement, so every track keeps its weight;
* the **probability of improvement** P(X > Y) is, per track, the Mann-Whitney U statistic of X's runs against Y's
  divided by ``n_x * n_y`` (ties count one half), averaged over tracks;
* a **performance profile** is the fraction of runs scoring above each threshold.

Seeds are the runs, never episodes: an eval set's episodes only feed each run's own Wilson interval.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
"""The level of every interval."""
REPS = 5000
"""Bootstrap replicates (rliable's default is 50,000; 5,000 puts the interval ends within about a point of it)."""


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of every entry of ``scores`` (any shape): the mean after cutting 25% at each end."""
    return float(stats.trim_mean(np.asarray(scores, dtype=float), 0.25, axis=None))


def as_matrix(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """``scores`` as a ``runs x tracks`` float matrix (a flat list is one track)."""
    m = np.asarray(scores, dtype=float)
    if m.ndim == 1:
        m = m[:, None]
    if m.ndim != 2 or m.shape[0] == 0:
        raise ValueError(f"scores must be runs x tracks with at least one run, got shape {m.shape}")
    return m


def stratified_resample(m: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One stratified bootstrap replicate of ``m``: its runs resampled with replacement within each track (column)."""
    rows = rng.integers(0, m.shape[0], size=m.shape)
    return np.take_along_axis(m, rows, axis=0)


def bootstrap_interval(
    statistic: Callable[..., float],
    *matrices: np.ndarray,
    reps: int = REPS,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """Percentile interval of ``statistic(*matrices)`` over ``reps`` stratified bootstrap replicates, each matrix
    resampled on its own."""
    rng = np.random.default_rng(seed)
    values = np.array([statistic(*(stratified_resample(m, rng) for m in matrices)) for _ in range(reps)])
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def iqm_with_interval(scores: Sequence[float] | np.ndarray, reps: int = REPS, seed: int = 0) -> dict[str, float]:
    """``{"iqm", "low", "high"}``: the IQM of a ``runs x tracks`` score matrix and its 95% stratified bootstrap
    interval."""
    m = as_matrix(scores)
    low, high = bootstrap_interval(iqm, m, reps=reps, seed=seed)
    return {"iqm": iqm(m), "low": low, "high": high}


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y): per track the Mann-Whitney U of X's runs against Y's over ``n_x * n_y`` (ties one half), averaged
    over tracks. ``x`` and ``y`` are ``runs x tracks`` (their run counts may differ)."""
    x, y = as_matrix(x), as_matrix(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y need the same tracks, got {x.shape[1]} and {y.shape[1]} columns")
    # U / (n_x n_y) counted over all pairs at once (scipy.stats.mannwhitneyu's statistic, without its p-value).
    wins = (x[:, None, :] > y[None, :, :]) + 0.5 * (x[:, None, :] == y[None, :, :])
    return float(wins.mean(axis=(0, 1)).mean())


def improvement_with_interval(x: np.ndarray, y: np.ndarray, reps: int = REPS, seed: int = 0) -> dict[str, float]:
    """``{"p", "low", "high"}``: P(X > Y) and its 95% stratified bootstrap interval (X's and Y's runs resampled
    independently)."""
    x, y = as_matrix(x), as_matrix(y)
    low, high = bootstrap_interval(probability_of_improvement, x, y, reps=reps, seed=seed)
    return {"p": probability_of_improvement(x, y), "low": low, "high": high}


def performance_profile(scores: np.ndarray, thresholds: Sequence[float]) -> np.ndarray:
    """The fraction of all runs (over every track) that score strictly above each threshold."""
    m = as_matrix(scores)
    return np.array([float(np.mean(m > tau)) for tau in thresholds])
