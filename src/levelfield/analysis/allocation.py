"""Per-cell repeats and outcomes → where the next trials of an adaptive sweep go, and when to stop.

A *cell* is one (configuration, task). The target of a sweep is a linear contrast of
configuration scores: one configuration's score (coefficients [1]) or the paired difference of
two (coefficients [1, −1]). Per task i the contrast has the value d_i = Σ_c coef_c · mean_ci, the
estimate is the mean of the d_i over the n tasks, and its variance with K_ci repeats is

    Var = Var_task(d) / n + Σ_ci coef_c² σ_ci² / K_ci / n²

(estimators.py: the between-task part plus each task's repeat noise with its own K). Only the
second part falls with repeats, and it falls fastest, for a given number of trials, when
K_ci ∝ |coef_c| σ_ci (Neyman allocation: minimise Σ a_ci²/K_ci subject to Σ K_ci = T with
a_ci = |coef_c| σ_ci / n). Tasks solved on every attempt or on none have σ ≈ 0; the uncertain
ones carry the variance and get the trials.

The σ come from few trials: a task seen 0/2 has a measured σ of 0 but may well be a 0.3 task.
Each task's variance (over its trials under the target's configurations) is therefore shrunk
toward the pooled value with the weight of PRIOR_TRIALS pseudo-trials, so that no task is ignored
forever; and repeats already spent are never taken back (K_ci only grows), so the allocation is
the constrained Neyman one: K_ci = max(K_ci now, λ·a_ci), λ found by bisection.

Every function takes arrays whose last two axes are (configuration, task) and any leading axes
(the simulation study runs 2,000 sweeps at once), and returns arrays of the leading shape.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from levelfield.analysis.estimators import z_value

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

# Weight of the pooled variance, in trials. Allocating on a task's own outcomes pulls its mean
# toward what its first trials showed (a task seen 2/2 keeps few repeats, one seen 1/2 has its
# failure diluted): the simulation study measured a bias of 0.5 points on the paired difference
# with a weight of 0.25, 0.15-0.2 at 8-12, 0.05 uniform. 12 keeps it under 0.2 points with
# 95 % coverage and still saves ~30 % of the trials (benchmarks/adaptive_allocation.py).
PRIOR_TRIALS = 12.0
ROUND_MIN_SHARE = 0.1  # a round adds at least 10 % of the trials so far (a round is a barrier)
ROUND_MAX_SHARE = 0.25  # and at most a quarter more, so the variances are measured again first
_BISECTIONS = 40  # halvings of log λ over [1e-6, 1e10]: K' exact to ~1e-9 relative


@dataclass(frozen=True, slots=True)
class TargetState:
    """The target's estimate now and what reaching `half_width` would take (leading shape)."""

    estimate: FloatArray
    half_width: FloatArray
    between: FloatArray  # Var_task(d)/n, the part repeats cannot remove (≥ 0)
    within: FloatArray  # measured Σ coef² σ²/K / n²
    needed: FloatArray  # more trials to reach the target half-width (inf: repeats cannot)
    tasks_needed: FloatArray  # tasks (at the current repeats) that would, when repeats cannot


def contrast(means: FloatArray, coef: FloatArray) -> FloatArray:
    """Per-task value of the target: Σ_c coef_c · mean_ci, shape (..., n)."""
    return np.einsum("c,...ci->...i", np.asarray(coef, float), means)


def cell_variance(k: FloatArray, passes: FloatArray) -> FloatArray:
    """Unbiased within-cell variance of one binary trial, K/(K−1)·m(1−m); NaN where K < 2."""
    k = np.asarray(k, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = passes / k
        return np.where(k > 1, k / (k - 1) * m * (1 - m), np.nan)


def shrunk_variance(k: FloatArray, passes: FloatArray, prior: float = PRIOR_TRIALS) -> FloatArray:
    """σ² per task pulled toward the pooled σ² over tasks (pooled with the weights K − 1, i.e. the
    within-task sum of squares over its degrees of freedom). Shape (..., n)."""
    k = np.asarray(k, float)
    raw = cell_variance(k, passes)
    dof = np.clip(k - 1, 0, None)
    filled = np.where(np.isnan(raw), 0.0, raw)
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled = (filled * dof).sum(-1, keepdims=True) / dof.sum(-1, keepdims=True)
    pooled = np.where(np.isnan(pooled), 0.25, pooled)  # nothing measured yet: the Bernoulli max
    return (filled * dof + prior * pooled) / (dof + prior)


def measure(
    k: FloatArray, passes: FloatArray, coef: FloatArray, level: float = 0.95
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """(estimate, half-width, between, within) of the target from the cells' counts. The
    half-width is z·sd(d)/sqrt(n), the clustered CI of estimators.py; `within` is its measured
    repeat part Σ coef²σ²/K/n² and `between` = total − within, clipped at 0."""
    k = np.asarray(k, float)
    coef = np.asarray(coef, float)
    n = k.shape[-1]
    d = contrast(passes / k, coef)
    total = d.var(axis=-1, ddof=1) / n
    raw = cell_variance(k, passes)
    raw = np.where(np.isnan(raw), 0.0, raw)
    within = np.einsum("c,...ci->...", coef**2, raw / k) / n**2
    between = np.clip(total - within, 0.0, None)
    return d.mean(-1), z_value(level) * np.sqrt(total), between, within


def target_state(
    k: FloatArray,
    a: FloatArray,
    coef: FloatArray,
    passes: FloatArray,
    half_width: float,
    level: float = 0.95,
) -> TargetState:
    """Measure the target on the counted trials and project the trials that would bring its CI
    to `half_width` with the allocation weights `a` (from the pilot)."""
    estimate, now, between, within = measure(k, passes, coef, level)
    n = np.shape(k)[-1]
    z = z_value(level)
    budget = (half_width / z) ** 2 - between
    needed = trials_to_reach(np.maximum(np.asarray(k, float), 1.0), a, budget)
    total = (now / z) ** 2
    tasks = np.where(np.isinf(needed), np.ceil(n * total * (z / half_width) ** 2), np.nan)
    return TargetState(estimate, now, between, within, needed, tasks)


def weights(k: FloatArray, passes: FloatArray, coef: FloatArray) -> FloatArray:
    """a_ci = |coef_c|·σ̃_i/n: the square root of each cell's share of the variance at K = 1.

    σ_i is the task's, from its trials under every configuration of the target together: the
    configurations of a comparison differ on a few tasks and by a few points, and twice the trials
    tell a task seen 1/2 and 1/2 from one seen 0/2 and 2/2 far better than either cell alone."""
    coef = np.abs(np.asarray(coef, float))
    used = coef > 0
    n = np.shape(k)[-1]
    sigma = np.sqrt(shrunk_variance(k[..., used, :].sum(-2), passes[..., used, :].sum(-2)))
    # Every task certain so far (the pooled variance is 0): nothing to tell them apart, so the
    # next round is uniform rather than nothing.
    sigma = np.where(sigma.sum(-1, keepdims=True) > 0, sigma, 1.0)
    return coef[:, None] * sigma[..., None, :] / n


def _level(k: FloatArray, a: FloatArray, lam: FloatArray) -> FloatArray:
    """K' = max(K, λ·a) for λ of the leading shape."""
    return np.maximum(k, lam[..., None, None] * a)


def _bisect(lo: FloatArray, hi: FloatArray, too_small: object) -> FloatArray:
    """Smallest λ in [lo, hi] (geometric bisection) for which too_small(λ) is False."""
    for _ in range(_BISECTIONS):
        mid = np.sqrt(lo * hi)
        small = too_small(mid)  # type: ignore[operator]
        lo, hi = np.where(small, mid, lo), np.where(small, hi, mid)
    return hi


def trials_to_reach(k: FloatArray, a: FloatArray, budget: FloatArray) -> FloatArray:
    """Fewest more trials (real-valued) with Σ a²/K' ≤ budget and K' ≥ K; inf when budget ≤ 0
    and some cell still carries variance; 0 when already there."""
    budget = np.asarray(budget, float)
    now = (a**2 / k).sum((-2, -1))
    shape = now.shape
    lo, hi = np.full(shape, 1e-6), np.full(shape, 1e10)
    lam = _bisect(lo, hi, lambda x: (a**2 / _level(k, a, x)).sum((-2, -1)) > budget)
    extra = (_level(k, a, lam) - k).sum((-2, -1))
    extra = np.where(now <= budget, 0.0, extra)
    return np.where((budget <= 0) & (now > 0), np.inf, extra)


def allocate(k: FloatArray, a: FloatArray, extra: IntArray, minimum: int = 0) -> IntArray:
    """Split `extra` more trials (per leading index) over the cells: first up to `minimum` per
    cell, then the constrained Neyman levels rounded by largest remainder, so that the counts
    sum to `extra` exactly."""
    k = np.asarray(k, np.int64)
    base = np.clip(minimum - k, 0, None)
    extra = np.asarray(extra, np.int64) - base.sum((-2, -1))
    if np.any(extra < 0):
        raise ValueError("a round must at least bring every cell to the minimum")
    floor = k + base
    total = floor.sum((-2, -1)) + extra
    lo, hi = np.full(extra.shape, 1e-6), np.full(extra.shape, 1e10)
    lam = _bisect(lo, hi, lambda x: _level(floor, a, x).sum((-2, -1)) < total)
    share = np.where(a > 0, _level(floor, a, lam) - floor, 0.0)
    share *= (extra / np.maximum(share.sum((-2, -1)), 1e-12))[..., None, None]
    whole = np.floor(share).astype(np.int64)
    left = extra - whole.sum((-2, -1))
    flat_shape = (*whole.shape[:-2], -1)
    remainder = (share - whole).reshape(flat_shape)
    rank = np.argsort(np.argsort(-remainder, axis=-1, kind="stable"), axis=-1, kind="stable")
    whole += (rank < left[..., None]).reshape(whole.shape)
    return base + whole


def round_size(trials_so_far: IntArray, needed: FloatArray, budget_left: IntArray) -> IntArray:
    """Trials in the next round: what the projection says is needed, at least ROUND_MIN_SHARE of
    the trials so far (the projection is an estimate: a round of 0 would stall), at most double,
    never beyond the budget."""
    trials_so_far = np.asarray(trials_so_far, np.int64)
    low = np.ceil(ROUND_MIN_SHARE * trials_so_far)
    high = np.floor(ROUND_MAX_SHARE * trials_so_far)
    want = np.clip(np.ceil(np.where(np.isinf(needed), high, needed)), low, high)
    return np.minimum(want, budget_left).astype(np.int64)
