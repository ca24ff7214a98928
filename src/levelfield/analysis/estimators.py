"""Per-task outcomes → a score with its noise band.

Tasks, not trials, are the sampling unit (Miller 2024, "Adding Error Bars to Evals",
arXiv 2411.00640): a benchmark is a sample of tasks, and a task's K repeats are correlated, so
trials are averaged within a task first and the standard error is that of the mean over tasks.

Miller writes the variance of the score as `(Var_task(mu) + E[sigma^2]/K) / n`: the spread of the
tasks' true pass rates plus the repeat noise left after averaging K repeats. The analytic SE used
here, `sd(per-task means) / sqrt(n)`, estimates exactly that sum, because the sample variance of the
per-task means has expectation `Var_task(mu) + E[sigma^2]/K` when every task has K repeats.
`variance_components` splits it back into the two terms with unbiased moment estimators, so the two
forms agree to rounding (tests/unit/test_estimators.py shows it); the split is what power.py needs.

Every function here is pure: arrays in, a frozen dataclass or tuple out, NaN when undefined
(never 0 for an SE that cannot be computed), randomness only from the `seed` given.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy import special

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

N_RESAMPLES = 2000  # percentile CI endpoints are stable to ~0.2 pt at 2000 (Efron & Tibshirani)
# Resamples are drawn in blocks of at most this many (resample × task) cells to bound memory.
_BLOCK_CELLS = 4_000_000

NAN_PAIR = (math.nan, math.nan)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A task-clustered mean: `ci` is the normal interval at `level` from the analytic SE."""

    mean: float
    se: float
    ci: tuple[float, float]
    n_tasks: int
    n_trials: int


@dataclass(frozen=True, slots=True)
class VarianceComponents:
    """Miller's split of the variance of one task's mean outcome.

    `var_task`: between-task variance of the true per-task rates (may come out negative from
    the moment estimator on small samples; it is kept as computed so that the identity holds).
    `mean_within_var`: E[sigma^2], the average within-task (repeat) variance of one trial.
    `mean_within_var_over_k`: E[sigma^2 / K] with each task's own K.
    `total`: sample variance of the per-task means = var_task + mean_within_var_over_k.
    """

    var_task: float
    mean_within_var: float
    mean_within_var_over_k: float
    total: float
    repeats: float
    n_tasks: int


def clipped(estimate: Estimate) -> Estimate:
    """The normal CI of a rate, clipped to [0, 1]: a rate cannot leave it, and a band reaching
    below 0 (few infra errors) would only invite misreading."""
    lo, hi = estimate.ci
    return replace(estimate, ci=(max(0.0, lo), min(1.0, hi)))


def z_value(level: float) -> float:
    """Two-sided normal quantile for a central interval at `level` (0.95 → 1.96)."""
    return float(special.ndtri(0.5 + level / 2))


def task_means(y: FloatArray, task: IntArray) -> tuple[FloatArray, IntArray]:
    """Per-task mean and trial count. `task` holds dense ids 0..n-1 (e.g. from `np.unique(...,
    return_inverse=True)`); an id with no trial gets mean NaN and count 0."""
    counts = np.bincount(task)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.bincount(task, weights=np.asarray(y, float), minlength=counts.size) / counts
    return means, counts


def mean_of_tasks(per_task: FloatArray, level: float = 0.95, n_trials: int = -1) -> Estimate:
    """Mean over tasks with SE = sd(per-task means)/sqrt(n). NaN entries (tasks where the
    variable is undefined) are left out. n_trials is carried through for the report only."""
    values = np.asarray(per_task, float)
    values = values[~np.isnan(values)]
    n = int(values.size)
    mean = float(values.mean()) if n else math.nan
    se = float(values.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    z = z_value(level)
    return Estimate(mean, se, (mean - z * se, mean + z * se), n, n_trials)


def clustered_mean(y: FloatArray, task: IntArray, level: float = 0.95) -> Estimate:
    """Task-clustered mean of trial outcomes `y`: average each task's repeats, then the tasks."""
    means, counts = task_means(y, task)
    return mean_of_tasks(means[counts > 0], level, int(counts.sum()))


def variance_components(y: FloatArray, task: IntArray) -> VarianceComponents:
    """Miller's decomposition from trial outcomes; see the module docstring."""
    y = np.asarray(y, float)
    counts = np.bincount(task)
    keep = counts > 0
    sums = np.bincount(task, weights=y, minlength=counts.size)[keep]
    squares = np.bincount(task, weights=y * y, minlength=counts.size)[keep]
    return components_from_sums(sums, squares, counts[keep].astype(float))


def components_from_sums(
    sums: FloatArray, squares: FloatArray, k: FloatArray
) -> VarianceComponents:
    """Same as `variance_components` from per-task sums of y and y^2 and trial counts K (for
    binary outcomes squares == sums, so counts of passes suffice). Tasks with K = 1 carry no
    information on sigma^2: when every task has K = 1 the split is NaN (total still defined)."""
    n = int(k.size)
    means = sums / k
    total = float(means.var(ddof=1)) if n > 1 else math.nan
    multi = k > 1
    if not multi.any():
        return VarianceComponents(math.nan, math.nan, math.nan, total, float(k.mean()), n)
    within = (squares[multi] - k[multi] * means[multi] ** 2) / (k[multi] - 1)
    mean_within = float(within.mean())
    # E[sigma^2/K] over all tasks, with sigma^2 estimated where K > 1 (their average elsewhere).
    within_all = np.full(n, mean_within)
    within_all[multi] = within
    within_over_k = float((within_all / k).mean())
    return VarianceComponents(
        total - within_over_k, mean_within, within_over_k, total, float(k.mean()), n
    )


def wilson_interval(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a plain proportion over `n` trials (ignores clustering: it is
    shown beside the clustered interval to make the difference visible, not instead of it)."""
    if n <= 0:
        return NAN_PAIR
    z = z_value(level)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (centre - half, centre + half)


def resample_counts(n: int, n_resamples: int, rng: np.random.Generator) -> FloatArray:
    """A (n_resamples × n) matrix: how often each of n tasks is drawn in each bootstrap resample.
    Counts rather than indices let several per-task variables share one resample via a matmul."""
    draws = rng.integers(0, n, size=(n_resamples, n))
    offsets = (np.arange(n_resamples) * n)[:, None]
    flat = np.bincount((draws + offsets).ravel(), minlength=n_resamples * n)
    return flat.reshape(n_resamples, n).astype(float)


def bootstrap_means(
    per_task: FloatArray, n_resamples: int = N_RESAMPLES, seed: int = 0
) -> FloatArray:
    """Task-level cluster bootstrap of the mean of each column of `per_task` (n × m, or n).

    All columns share the same resampled tasks. NaN entries (variable undefined for that task)
    are left out of each resample's mean, like `mean_of_tasks` does. Returns (n_resamples × m).
    """
    values = np.asarray(per_task, float)
    flat = values.ndim == 1
    values = values[:, None] if flat else values
    n = values.shape[0]
    if n == 0:
        out = np.full((n_resamples, values.shape[1]), math.nan)
        return out[:, 0] if flat else out
    defined = ~np.isnan(values)
    filled = np.where(defined, values, 0.0)
    parts = []
    for weights in _resample_blocks(n, n_resamples, seed):
        with np.errstate(invalid="ignore", divide="ignore"):
            parts.append((weights @ filled) / (weights @ defined))
    out = np.vstack(parts)
    return out[:, 0] if flat else out


def _resample_blocks(n: int, n_resamples: int, seed: int) -> Iterable[FloatArray]:
    """The resample counts of `bootstrap_means`, block by block. A report bootstraps every
    configuration with the same seed, and on a leaderboard they all have the same number of
    tasks: drawing the 2,000 × 89 counts once instead of 55 times, when they fit in one block,
    gives the same numbers for a fiftieth of the work."""
    if n * n_resamples <= _BLOCK_CELLS:
        return _one_block(n, n_resamples, seed)
    return _draw_blocks(n, n_resamples, seed)


@functools.lru_cache(maxsize=4)
def _one_block(n: int, n_resamples: int, seed: int) -> tuple[FloatArray, ...]:
    blocks = tuple(_draw_blocks(n, n_resamples, seed))
    for weights in blocks:
        weights.setflags(write=False)  # shared through the cache: nobody may change them
    return blocks


def _draw_blocks(n: int, n_resamples: int, seed: int) -> Iterator[FloatArray]:
    rng = np.random.default_rng(seed)
    block = max(1, _BLOCK_CELLS // n)
    for start in range(0, n_resamples, block):
        yield resample_counts(n, min(block, n_resamples - start), rng)


def percentile_ci(samples: FloatArray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap samples; NaN when there is none to take."""
    finite = np.asarray(samples, float)
    finite = finite[~np.isnan(finite)]
    if finite.size == 0:
        return NAN_PAIR
    lo, hi = np.quantile(finite, [(1 - level) / 2, (1 + level) / 2])
    return (float(lo), float(hi))


def bootstrap_ci(
    per_task: FloatArray, level: float = 0.95, n_resamples: int = N_RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """Seeded task-level cluster-bootstrap percentile CI of the mean over tasks."""
    return percentile_ci(bootstrap_means(per_task, n_resamples, seed), level)
