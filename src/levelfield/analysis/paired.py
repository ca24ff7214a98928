"""Two configurations → their paired difference, tested.

A comparison is paired by task: both configurations ran the same tasks, and most of the variance of
a score is between tasks (hard tasks are hard for everyone), so the per-task difference cancels it.
The SE of the mean difference is `sd(d)/sqrt(n)` over common tasks; the p-value is a sign-flip
permutation of the per-task differences (exact enumeration up to EXACT_MAX_N tasks, seeded Monte
Carlo above), or the exact McNemar test when every task has exactly one trial on each side (then the
differences are -1/0/+1 and the sign-flip test *is* McNemar's exact test). Tasks found on one side
only are listed in the result, never silently dropped. Holm adjusts the p-values of a whole sweep.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import FloatArray, z_value

EXACT_MAX_N = 16  # 2^16 = 65 536 sign patterns: exact enumeration still takes milliseconds
N_FLIPS = 10_000  # Monte Carlo p-values resolve ~0.002 at p = 0.05 with 10 000 flips
METRICS = {"score": "score", "clean_score": "clean", "infra_error_rate": "infra_rate"}


@dataclass(frozen=True, slots=True)
class PairedEstimate:
    """Mean of per-task differences a − b over `n_tasks` common tasks."""

    diff: float
    se: float
    ci: tuple[float, float]
    mean_a: float
    mean_b: float
    correlation: float
    n_tasks: int


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """One pair of a sweep: `a − b` for the `by` column, the other identity columns fixed."""

    by: str
    a: str
    b: str
    within: tuple[tuple[str, str], ...]
    metric: str
    estimate: PairedEstimate
    p_value: float
    method: str
    p_holm: float
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every pair of a sweep, Holm-adjusted together."""

    by: str
    metric: str
    level: float
    pairs: tuple[PairedComparison, ...]


def paired_difference(a: FloatArray, b: FloatArray, level: float = 0.95) -> PairedEstimate:
    """Paired estimate from aligned per-task values (NaN pairs are left out)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    keep = ~(np.isnan(a) | np.isnan(b))
    a, b = a[keep], b[keep]
    d = a - b
    n = int(d.size)
    diff = float(d.mean()) if n else math.nan
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    half = z_value(level) * se
    corr = math.nan
    if n > 2 and a.std() > 0 and b.std() > 0:
        corr = float(np.corrcoef(a, b)[0, 1])
    mean_a = float(a.mean()) if n else math.nan
    mean_b = float(b.mean()) if n else math.nan
    return PairedEstimate(diff, se, (diff - half, diff + half), mean_a, mean_b, corr, n)


def clip_rate_difference(estimate: PairedEstimate) -> PairedEstimate:
    """A difference of two rates lies in [−1, 1]; its normal CI on few tasks can reach past that,
    which only invites misreading."""
    lo, hi = estimate.ci
    return replace(estimate, ci=(max(-1.0, lo), min(1.0, hi)))


def sign_flip_pvalue(
    d: FloatArray, n_flips: int = N_FLIPS, seed: int = 0, exact_max_n: int = EXACT_MAX_N
) -> tuple[float, str]:
    """Two-sided p-value of H0 "per-task differences are symmetric about 0" and the method used.

    Under H0 each difference's sign is a fair coin. The statistic is |sum(d)|. Exact: every sign
    pattern; Monte Carlo: (1 + #extreme) / (1 + n_flips), which is never 0 and stays valid.
    """
    d = np.asarray(d, float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return math.nan, "none"
    observed = abs(d.sum())
    tolerance = 1e-9 * max(1.0, float(np.abs(d).sum()))
    if d.size <= exact_max_n:
        patterns = np.arange(2**d.size)[:, None] >> np.arange(d.size) & 1
        totals = (1 - 2 * patterns) @ d
        return float(np.mean(np.abs(totals) >= observed - tolerance)), "sign-flip exact"
    rng = np.random.default_rng(seed)
    extreme = 0
    block = max(1, 4_000_000 // d.size)
    total = d.sum()
    for start in range(0, n_flips, block):
        rows = min(block, n_flips - start)
        # One random bit per sign, unpacked: a flipped set F gives sum(d) − 2·sum(d[F]).
        bits = rng.integers(0, 256, size=(rows, -(-d.size // 8)), dtype=np.uint8)
        flipped = np.unpackbits(bits, axis=1, count=d.size)
        extreme += int(np.sum(np.abs(total - 2 * (flipped @ d)) >= observed - tolerance))
    return (1 + extreme) / (1 + n_flips), "sign-flip Monte Carlo"


def mcnemar_pvalue(a_only: int, b_only: int) -> float:
    """Exact McNemar: the discordant pairs split like a fair coin under H0 (binomial test)."""
    if a_only + b_only == 0:
        return 1.0
    return float(stats.binomtest(a_only, a_only + b_only, 0.5).pvalue)


def holm(p_values: Sequence[float]) -> FloatArray:
    """Holm's step-down adjustment (controls the family-wise error rate); NaN stays NaN and does
    not count towards the family size."""
    p = np.asarray(p_values, float)
    out = np.full(p.shape, math.nan)
    idx = np.flatnonzero(~np.isnan(p))
    m = idx.size
    if m == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    scaled = (m - np.arange(m)) * p[order]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))
    return out


def compare(
    trials: pd.DataFrame,
    *,
    by: str = "policy",
    metric: str = "score",
    level: float = 0.95,
    seed: int = 0,
    order: Sequence[str] | None = None,
) -> Comparison:
    """All pairs of `by` values (policy, agent, run or window) within each combination of the
    other identity columns, on `metric` (score, clean_score or infra_error_rate).

    `order` fixes which side is `a`: pairs are (order[i], order[j]) for i < j. By default policies
    go from the loosest ceiling to the tightest (so "headroom − strict") and other labels sorted.
    Comparing agents or policies of two stacked runs pools the runs (else an agent found only in
    run A could never meet one found only in run B).
    """
    counts = _tidy.task_counts(_tidy.check_trials(trials))
    counts = _tidy.pool(counts, "run") if by != "run" else _pool_run_labels(counts)
    if order is None and by == "policy":
        order = list(reversed(_tidy.policy_order(_tidy.policy_ceilings(trials))))
    return compare_rates(
        _tidy.task_rates(counts), by=by, metric=metric, level=level, seed=seed, order=order
    )


def _pool_run_labels(counts: pd.DataFrame) -> pd.DataFrame:
    """Runs compared as wholes when a column only says which run a trial is in: one value in
    each run, another in the other (two imported submissions are each their own agent). Left
    in, it would pair nothing with nothing."""
    for column in _tidy.identity_columns(counts):
        if column == "run" or column not in counts.columns:
            continue
        per_run = counts.groupby("run")[column].nunique()
        if (per_run == 1).all() and counts[column].nunique() == len(per_run) > 1:
            counts = _tidy.pool(counts, column)
    return counts


def compare_rates(
    rates: pd.DataFrame,
    *,
    by: str,
    metric: str = "score",
    level: float = 0.95,
    seed: int = 0,
    order: Sequence[str] | None = None,
) -> Comparison:
    """`compare` on per-task rates (`_tidy.task_rates`), which summarize computes once."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, not {metric!r}")
    if by not in rates.columns or by == "task":
        raise ValueError(f"cannot compare by {by!r}: not an identity column of the trial table")
    within_cols = [c for c in _tidy.identity_columns(rates) if c != by]
    order = list(order) if order is not None else sorted(set(rates[by]))
    pairs = []
    for key, group in _groups(rates, within_cols):
        within = tuple(zip(within_cols, key, strict=True))
        present = [o for o in order if o in set(group[by])]
        for a, b in itertools.combinations(present, 2):
            pairs.append(_compare_pair(group, by, (a, b), within, metric, level, seed))
    adjusted = holm([p.p_value for p in pairs])
    pairs = [replace(p, p_holm=float(q)) for p, q in zip(pairs, adjusted, strict=True)]
    return Comparison(by, metric, level, tuple(pairs))


def _groups(
    rates: pd.DataFrame, within_cols: list[str]
) -> list[tuple[tuple[str, ...], pd.DataFrame]]:
    if not within_cols:
        return [((), rates)]
    return [
        (key if isinstance(key, tuple) else (key,), group)
        for key, group in rates.groupby(within_cols, sort=True)
    ]


def _compare_pair(
    group: pd.DataFrame,
    by: str,
    labels: tuple[str, str],
    within: tuple[tuple[str, str], ...],
    metric: str,
    level: float,
    seed: int,
) -> PairedComparison:
    a, b = labels
    side_a = group[group[by] == a].set_index("task")
    side_b = group[group[by] == b].set_index("task")
    common = side_a.index.intersection(side_b.index).sort_values()
    column = METRICS[metric]
    va = side_a.loc[common, column].to_numpy(float)
    vb = side_b.loc[common, column].to_numpy(float)
    estimate = clip_rate_difference(paired_difference(va, vb, level))
    p_value, method = _pvalue(side_a.loc[common], side_b.loc[common], va - vb, metric, seed)
    only_a = tuple(sorted(side_a.index.difference(common)))
    only_b = tuple(sorted(side_b.index.difference(common)))
    return PairedComparison(
        by, a, b, within, metric, estimate, p_value, method, math.nan, only_a, only_b
    )


def _pvalue(
    side_a: pd.DataFrame, side_b: pd.DataFrame, d: FloatArray, metric: str, seed: int
) -> tuple[float, str]:
    """McNemar when both sides have exactly one trial per task and the metric is binary per trial;
    otherwise the sign-flip permutation test."""
    single = bool((side_a["n_trials"] == 1).all() and (side_b["n_trials"] == 1).all())
    if single and metric != "clean_score" and d.size:
        return mcnemar_pvalue(int(np.sum(d > 0)), int(np.sum(d < 0))), "McNemar exact"
    return sign_flip_pvalue(d, seed=seed)
