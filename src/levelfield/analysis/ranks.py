"""Per-task scores of several entries → confidence sets for their ranks, and tiers.

Mogstad, Romano, Shaikh and Wilhelm, "Inference for Ranks with Applications to Mobility across
Neighborhoods and Academic Achievement across Countries", Review of Economic Studies 91 (2024),
doi:10.1093/restud/rdad006; the construction follows their R package csranks (`csranks`,
`csdiffmeans`, `cstaubest`), read, not copied.

The rank of entry j is 1 + the number of entries whose true score is higher (ties share the best
rank; an estimated rank likewise, on exact scores when the caller gives them, `exact`, so that
two entries with 376 passes of 445 share a rank whatever float rounding does). It is bounded by
tests of the ordered pairs: for every (j, k), H_jk says "θ_j <= θ_k", and rejecting it proves j
better than k. Then

    rank set of j = [1 + #{k proven better than j}, p − #{k proven worse than j}].

The rank sets hold jointly with probability `level` when the pairs' family-wise error rate is
held at 1 − level. Here that is Holm's step-down (Holm 1979, "A simple sequentially rejective
multiple test procedure", Scand. J. Statist. 6) over every ordered pair's one-sided paired t-test:
with m hypotheses standing, each whose p-value is at most (1 − level) / m is rejected, which
shrinks m, and the test is repeated until nothing more is rejected. Holm holds the family-wise
error rate under any dependence between the pairs.

**The same answer under any seed, by construction.** A max-t step-down (Romano and Wolf 2005),
as csranks computes it, takes each step's critical value as a quantile of Monte Carlo draws of
the largest studentised difference. It uses the correlation between the pairs and so proves a
few more, but a pair whose t lies within the draws' error of the critical value is proven or not
depending on the seed and the number of draws, and with it the rank sets and who could be #1.
Holm's critical values are computed, not drawn (the Student t quantile at (1 − level) / m), so
nothing here takes a seed. What that costs on the 55 shared submissions is in the README ("Is #1
really #1?"), measured by benchmarks/rank_coverage.py.

Each t_jk = (θ̂_j − θ̂_k) / se_jk divides by an SE estimated from the same n tasks, so its law is
Student's t with n − 1 degrees of freedom, and its p-value is read from that law.

Here the estimates are paired and clustered by task: every entry ran the same tasks, so the
scores are correlated through the tasks' difficulty. se_jk is the task-clustered SE of θ̂_j −
θ̂_k, which is exactly the paired SE of j − k (`paired.paired_difference`, scipy's `ttest_rel`)
when both ran the same tasks. An entry that skipped a task gets no influence from it.

- **simultaneous** sets: the family is every ordered pair; they cover all ranks at once.
- **marginal** sets: for entry j alone, the family is the pairs that involve j (Holm over those);
  each covers its own entry's rank (narrower, but not jointly).
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
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray
from scipy import special

from levelfield.analysis.estimators import FloatArray

BoolArray = NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class RankSets:
    """Ranks of the entries in `labels` order: `rank` is the estimated rank (1 = best score),
    `simultaneous` and `marginal` the [lower, upper] rank sets, `tier` as in the module
    docstring, `proven_better` the pairs (better, worse) the simultaneous step-down rejected, and
    `critical_values` the t each of its steps compared with (the marginal ones: each entry's
    first)."""

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
    method: str = "Holm step-down over one-sided paired t-tests"


@dataclass(frozen=True, slots=True)
class _Pairs:
    """Every ordered pair's observed t and one-sided p-value (entries × entries), and which
    pairs can be tested at all (a nonzero SE)."""

    t: FloatArray
    p: FloatArray
    testable: BoolArray
    df: float


def rank_sets(
    per_task: FloatArray,
    labels: Sequence[str],
    *,
    level: float = 0.95,
    exact: Sequence[Fraction] | None = None,
) -> RankSets:
    """Rank sets from a (tasks × entries) array of per-task scores; NaN where an entry did not
    run a task. Higher scores rank first. `exact` gives the scores as fractions, in `labels`
    order, for the estimated ranks: without it, scores equal to 12 decimals tie."""
    values = np.asarray(per_task, float)
    if values.ndim != 2 or values.shape[1] != len(labels) or values.shape[1] == 0:
        raise ValueError("per_task must be tasks × entries, one column per label")
    if exact is not None and len(exact) != len(labels):
        raise ValueError("exact must give one score per label")
    scores = _scores(values)
    p = scores.size
    pairs = _pairs(values, scores)
    better, critical = _simultaneous(pairs, level)
    marginal = [_marginal(pairs, j, level) for j in range(p)]
    keys = list(exact) if exact is not None else [round(float(s), 12) for s in scores]
    names = tuple(str(label) for label in labels)
    return RankSets(
        labels=names,
        scores=tuple(float(s) for s in scores),
        rank=tuple(ranks_of(keys)),
        simultaneous=tuple(_bounds(better, j) for j in range(p)),
        marginal=tuple(bounds for bounds, _ in marginal),
        tier=_tiers(better, scores),
        could_be_first=tuple(names[j] for j in range(p) if not better[:, j].any()),
        proven_better=tuple((names[i], names[j]) for i, j in zip(*np.nonzero(better), strict=True)),
        critical_values=critical,
        marginal_critical_values=tuple(c[0] if c else math.nan for _, c in marginal),
        level=level,
    )


def ranks_of(scores: Sequence[Fraction] | Sequence[float]) -> list[int]:
    """1 + the number of strictly higher scores: equal scores share the best rank."""
    ordered = sorted(scores, reverse=True)
    first = {}
    for position, value in enumerate(ordered, 1):
        first.setdefault(value, position)
    return [first[value] for value in scores]


def _scores(values: FloatArray) -> FloatArray:
    present = ~np.isnan(values)
    if not present.any(axis=0).all():
        raise ValueError("every entry needs at least one task with a score")
    return np.nansum(values, axis=0) / present.sum(axis=0)


def _pairs(values: FloatArray, scores: FloatArray) -> _Pairs:
    """Influence of each task on each score (ψ), the clustered covariance it implies, and the
    observed t and one-sided p-value of every ordered pair."""
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
    df = float(n - 1)
    return _Pairs(t, np.where(testable, special.stdtr(df, -t), 1.0), testable, df)


def holm_step_down(
    p_values: FloatArray, alpha: float, df: float
) -> tuple[BoolArray, tuple[float, ...]]:
    """Holm's step-down: which hypotheses it rejects, and the critical t of each step (the t
    whose one-sided p-value is alpha / m, m the hypotheses standing). Each step rejects every
    standing p-value at most alpha / m, which rejects what rejecting them one by one would."""
    standing = np.ones(p_values.size, bool)
    critical: list[float] = []
    while standing.any():
        m = int(standing.sum())
        critical.append(float(special.stdtrit(df, 1 - alpha / m)))
        new = standing & (p_values <= alpha / m)
        if not new.any():
            break
        standing &= ~new
    return ~standing, tuple(critical)


def _simultaneous(pairs: _Pairs, level: float) -> tuple[BoolArray, tuple[float, ...]]:
    """Every testable ordered pair (j, k): rejected means j proven better than k."""
    rows, cols = np.nonzero(pairs.testable)
    rejected, critical = holm_step_down(pairs.p[rows, cols], 1 - level, pairs.df)
    better = np.zeros_like(pairs.testable)
    better[rows[rejected], cols[rejected]] = True
    return better, critical


def _marginal(pairs: _Pairs, j: int, level: float) -> tuple[tuple[int, int], tuple[float, ...]]:
    """Entry j alone: Holm over the pairs (j, k) and (k, j)."""
    ks = np.flatnonzero(pairs.testable[j])
    p = np.concatenate([pairs.p[j, ks], pairs.p[ks, j]])
    rejected, critical = holm_step_down(p, 1 - level, pairs.df)
    worse, better = rejected[: ks.size].sum(), rejected[ks.size :].sum()
    return (int(1 + better), int(pairs.t.shape[0] - worse)), critical


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
