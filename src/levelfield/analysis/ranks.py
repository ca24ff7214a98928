"""Per-task scores of several entries → confidence sets for their ranks, and tiers.

Mogstad, Romano, Shaikh and Wilhelm, "Inference for Ranks with Applications to Mobility across
Neighborhoods and Academic Achievement across Countries", Review of Economic Studies 91 (2024),
doi:10.1093/restud/rdad006; the construction follows their R package csranks (`csranks`,
`csdiffmeans`, `cstaubest`), read, not copied.

The rank of entry j is 1 + the number of entries whose true score is higher (ties share the best
rank). It is bounded by tests of the ordered pairs: for every (j, k), H_jk says "θ_j <= θ_k", and
rejecting it proves j better than k. Then

    rank set of j = [1 + #{k proven better than j}, p − #{k proven worse than j}].

The rank sets hold jointly with probability `level` when the pairs' family-wise error rate is
held at 1 − level: a max-t step-down (Romano and Wolf 2005) over the studentised differences
t_jk = (θ̂_j − θ̂_k) / se_jk. Its critical value is the `level` quantile of the largest
(Z_j − Z_k) / se_jk over the pairs not yet rejected, Z drawn from the estimates' joint normal law;
rejecting some pairs shrinks the family, lowers the critical value, and the test is repeated
until nothing more is rejected.

Each observed t_jk divides by an SE estimated from the same n tasks, so its law is Student's t
with n − 1 df rather than the normal law of the draws: every critical value is carried to t by
its tail probability (`student`). On 89 tasks this is what brings the simultaneous coverage of
tied entries from 93.6 % up to the 95 % it claims.

Here the estimates are paired and clustered by task: every entry ran the same tasks, so the
scores are correlated through the tasks' difficulty, and the joint law is the tasks' own. Z is
drawn as a Gaussian multiplier over tasks, Z = sum_t g_t ψ_t (g_t ~ N(0, 1), ψ_t the task's
influence on every score), whose covariance is exactly the task-clustered one and whose
se_jk is exactly the paired SE of j − k (`paired.paired_difference`) when both ran the same
tasks. An entry that skipped a task gets no influence from it.

- **simultaneous** sets: the family is every ordered pair; they cover all ranks at once.
- **marginal** sets: for entry j alone, the family is the pairs that involve j; each covers its
  own entry's rank (narrower, but not jointly).
- **could be #1**: the entries whose simultaneous set contains 1, i.e. that no entry is proven
  better than (csranks' `cstaubest` with τ = 1). It holds every true #1 with probability `level`.
- **tiers**: the layers of the "proven better" order of the simultaneous step-down. Tier 1 is the
  set that could be #1. An entry is in tier t + 1 when every entry proven better than it lies in
  tiers 1..t, and at least one of them in tier t. So no two entries of one tier are told apart,
  and each entry of tier t + 1 is proven worse than some entry of tier t; all of these statements
  hold together with probability `level`. An entry with a large SE (one repeat per task, say) can
  sit in a higher tier than entries scoring above it: tiers follow the evidence, not the order of
  the scores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import special
from threadpoolctl import threadpool_limits

from levelfield.analysis.estimators import FloatArray, IntArray

# The critical value for the shared leaderboard's 1,485 pairs (about 4.15) moves by an SD of
# 0.04 from seed to seed at 4,000 draws (measured, 6 seeds); 4x the draws would halve it.
N_DRAWS = 4000
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class RankSets:
    """Ranks of the entries in `labels` order: `rank` is the estimated rank (1 = best score),
    `simultaneous` and `marginal` the [lower, upper] rank sets, `tier` as in the module
    docstring, `proven_better` the pairs (better, worse) the simultaneous step-down rejected, and
    `critical_values` its successive critical values in t."""

    labels: tuple[str, ...]
    scores: tuple[float, ...]
    rank: tuple[int, ...]
    simultaneous: tuple[tuple[int, int], ...]
    marginal: tuple[tuple[int, int], ...]
    tier: tuple[int, ...]
    could_be_first: tuple[str, ...]
    proven_better: tuple[tuple[str, str], ...]
    critical_values: tuple[float, ...]
    marginal_critical_values: tuple[float, ...]
    level: float
    n_draws: int
    seed: int


@dataclass(frozen=True, slots=True)
class _Pairs:
    """Everything the step-downs need: observed t and drawn Z (draws × entries), se matrix."""

    t: FloatArray
    se: FloatArray
    z: FloatArray
    testable: BoolArray
    df: float


def rank_sets(
    per_task: FloatArray,
    labels: Sequence[str],
    *,
    level: float = 0.95,
    n_draws: int = N_DRAWS,
    seed: int = 0,
) -> RankSets:
    """Rank sets from a (tasks × entries) array of per-task scores; NaN where an entry did not
    run a task. Higher scores rank first."""
    values = np.asarray(per_task, float)
    if values.ndim != 2 or values.shape[1] != len(labels) or values.shape[1] == 0:
        raise ValueError("per_task must be tasks × entries, one column per label")
    scores = _scores(values)
    p = scores.size
    # One BLAS thread: the products here are small, and on a loaded 2-core host OpenBLAS's
    # threads only spin (measured 5x slower for the draws' product).
    with threadpool_limits(limits=1, user_api="blas"):
        pairs = _pairs(values, scores, n_draws, seed)
        better, critical = _simultaneous(pairs, level)
        marginal = [_marginal(pairs, j, level) for j in range(p)]
    tiers = _tiers(better, scores)
    names = tuple(str(label) for label in labels)
    return RankSets(
        labels=names,
        scores=tuple(float(s) for s in scores),
        rank=tuple(int(1 + np.sum(scores > s)) for s in scores),
        simultaneous=tuple(_bounds(better, j) for j in range(p)),
        marginal=tuple(bounds for bounds, _ in marginal),
        tier=tiers,
        could_be_first=tuple(names[j] for j in range(p) if not better[:, j].any()),
        proven_better=tuple((names[i], names[j]) for i, j in zip(*np.nonzero(better), strict=True)),
        critical_values=critical,
        marginal_critical_values=tuple(c[0] if c else math.nan for _, c in marginal),
        level=level,
        n_draws=n_draws,
        seed=seed,
    )


def _scores(values: FloatArray) -> FloatArray:
    present = ~np.isnan(values)
    if not present.any(axis=0).all():
        raise ValueError("every entry needs at least one task with a score")
    return np.nansum(values, axis=0) / present.sum(axis=0)


def _pairs(values: FloatArray, scores: FloatArray, n_draws: int, seed: int) -> _Pairs:
    """Influence of each task on each score (ψ), the clustered covariance it implies, the
    observed t of every ordered pair, and Gaussian-multiplier draws of the estimates' errors."""
    present = ~np.isnan(values)
    n = values.shape[0]
    influence = np.where(present, values - scores, 0.0) / present.sum(axis=0)
    small_sample = math.sqrt(n / (n - 1)) if n > 1 else math.nan  # sd with ddof = 1, as paired.py
    influence = influence * small_sample
    cov = influence.T @ influence
    var = np.diag(cov)
    with np.errstate(invalid="ignore"):
        se = np.sqrt(np.maximum(var[:, None] + var[None, :] - 2 * cov, 0.0))
    testable = (se > 1e-12) & ~np.eye(scores.size, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(testable, (scores[:, None] - scores[None, :]) / se, 0.0)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n_draws, n)) @ influence if n > 1 else np.zeros((n_draws, 1))
    return _Pairs(t, np.where(testable, se, np.nan), z, testable, float(n - 1))


def step_down(
    t: FloatArray,
    largest: Callable[[BoolArray], FloatArray],
    level: float,
    df: float = math.inf,
) -> tuple[BoolArray, tuple[float, ...]]:
    """Max-t step-down over hypotheses with observed statistics `t`: which it rejects, and the
    critical value of each step. `largest(standing)` gives, per draw, the largest drawn t over
    the hypotheses still standing; its `level` quantile is the step's critical value, carried
    to Student's t with `df` degrees of freedom by its tail probability (see `student`)."""
    standing = np.ones(t.size, bool)
    critical: list[float] = []
    while standing.any():
        c = student(float(np.quantile(largest(standing), level)), df)
        critical.append(c)
        new = standing & (t > c)
        if not new.any():
            break
        standing &= ~new
    return ~standing, tuple(critical)


def student(c: float, df: float) -> float:
    """The t with the normal tail probability of `c`: each observed t_jk is divided by an SE
    estimated from the same n tasks, so it has Student's t law with n − 1 df, not the normal law
    of the draws. Without it the simultaneous sets of 10 tied entries on 89 tasks covered 93.6 %
    instead of 95 % (benchmarks/rank_coverage.py, 500 leaderboards: 2.4 Monte Carlo SEs short)."""
    if not math.isfinite(df) or df < 1:
        return c
    return float(special.stdtrit(df, special.ndtr(c)))


def _simultaneous(pairs: _Pairs, level: float) -> tuple[BoolArray, tuple[float, ...]]:
    """Every testable ordered pair (j, k): rejected means j proven better than k. Per draw, the
    largest t over the standing pairs is the largest of the rows' maxima; a row's maximum is
    computed again only when one of its pairs was rejected (most rows keep theirs)."""
    rows, cols = np.nonzero(pairs.testable)
    row_max: dict[int, FloatArray] = {}
    row_standing: dict[int, int] = {}

    def largest(standing: BoolArray) -> FloatArray:
        out = np.full(pairs.z.shape[0], -np.inf)
        for j in np.unique(rows[standing]).tolist():
            ks = cols[standing & (rows == j)]
            if row_standing.get(j) != ks.size:
                row_max[j] = _drawn_row(pairs, j, ks).max(axis=1)
                row_standing[j] = ks.size
            np.maximum(out, row_max[j], out=out)
        return out

    rejected, critical = step_down(pairs.t[rows, cols], largest, level, pairs.df)
    better = np.zeros_like(pairs.testable)
    better[rows[rejected], cols[rejected]] = True
    return better, critical


def _marginal(pairs: _Pairs, j: int, level: float) -> tuple[tuple[int, int], tuple[float, ...]]:
    """Entry j alone: the pairs (j, k) and (k, j); t_kj = −t_jk, so one row of draws serves both
    (the largest drawn t_kj is minus the smallest drawn t_jk)."""
    ks = np.flatnonzero(pairs.testable[j])
    drawn = _drawn_row(pairs, j, ks)
    t = np.concatenate([pairs.t[j, ks], -pairs.t[j, ks]])

    def largest(standing: BoolArray) -> FloatArray:
        up, down = standing[: ks.size], standing[ks.size :]
        out = np.full(drawn.shape[0], -np.inf)
        if up.any():
            out = drawn[:, up].max(axis=1)
        if down.any():
            out = np.maximum(out, -drawn[:, down].min(axis=1))
        return out

    rejected, critical = step_down(t, largest, level, pairs.df)
    worse, better = rejected[: ks.size].sum(), rejected[ks.size :].sum()
    return (int(1 + better), int(pairs.t.shape[0] - worse)), critical


def _drawn_row(pairs: _Pairs, j: int, ks: IntArray) -> FloatArray:
    """(Z_j − Z_k) / se_jk for the given k, draws × len(ks)."""
    return (pairs.z[:, [j]] - pairs.z[:, ks]) / pairs.se[j, ks]


def _bounds(better: BoolArray, j: int) -> tuple[int, int]:
    p = better.shape[0]
    return int(1 + better[:, j].sum()), int(p - better[j, :].sum())


def _tiers(better: BoolArray, scores: FloatArray) -> tuple[int, ...]:
    """Layers of the proven-better order. A rejection needs θ̂_j − θ̂_k > c·se > 0, so whoever
    is proven better scores higher: going down the scores, every entry's betters have a tier."""
    tier = np.zeros(scores.size, int)
    for j in np.argsort(-scores, kind="stable"):
        above = tier[better[:, j]]
        tier[j] = 1 + (int(above.max()) if above.size else 0)
    return tuple(int(t) for t in tier)
