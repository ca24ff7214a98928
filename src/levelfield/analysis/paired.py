"""Two configurations → their paired difference, tested.

A comparison is paired by task: both configurations ran the same tasks, and most of the variance of
a score is between tasks (hard tasks are hard for everyone), so the per-task difference cancels it.
The SE of the mean difference is `sd(d)/sqrt(n)` over common tasks; the p-value is a sign-flip
permutation of the per-task differences (signflip.py: exact at any number of tasks when the
differences lie on a lattice, as scores of K repeats do), or the exact McNemar test when every task
has exactly one trial on each side (then the differences are -1/0/+1 and the sign-flip test *is*
McNemar's exact test). All pairs of a group are computed on one configurations × tasks matrix, so a
leaderboard's 1,485 pairs cost one array operation and a sign-flip each. Tasks found on one side
only are listed in the result, never silently dropped. Holm adjusts the p-values of a whole sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy import special

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import FloatArray, z_value
from levelfield.analysis.signflip import sign_flip_pvalue

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
    return paired_estimates(a[None, :], b[None, :], level)[0]


def clip_rate_difference(estimate: PairedEstimate) -> PairedEstimate:
    """A difference of two rates lies in [−1, 1]; its normal CI on few tasks can reach past that,
    which only invites misreading."""
    lo, hi = estimate.ci
    return replace(estimate, ci=(max(-1.0, lo), min(1.0, hi)))


def mcnemar_pvalue(a_only: int, b_only: int) -> float:
    """Exact McNemar: the discordant pairs split like a fair coin under H0 (binomial test)."""
    if a_only + b_only == 0:
        return 1.0
    # Binomial(n, 1/2) is symmetric: the two-sided p doubles the smaller tail (scipy's binomtest
    # gives the same; scipy.special spares importing scipy.stats, half a second of every start).
    n = a_only + b_only
    return min(1.0, 2 * float(special.bdtr(min(a_only, b_only), n, 0.5)))


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
    order: Sequence[str] | None = None,
) -> Comparison:
    """All pairs of `by` values (policy, agent, run or window) within each combination of the
    other identity columns, on `metric` (score, clean_score or infra_error_rate).

    `order` fixes which side is `a`: pairs are (order[i], order[j]) for i < j. By default policies
    go from the loosest ceiling to the tightest (so "headroom − strict") and other labels sorted.
    Comparing agents or policies of two stacked runs pools the runs (else an agent found only in
    run A could never meet one found only in run B). Comparing runs whose configurations differ
    only by a label that names the run (two imported submissions) compares them as wholes.
    """
    counts = _tidy.task_counts(_tidy.check_trials(trials))
    counts = _tidy.pool(counts, "run") if by != "run" else _pool_run_labels(counts)
    if order is None and by == "policy":
        order = list(reversed(_tidy.policy_order(_tidy.policy_ceilings(trials))))
    return compare_rates(_tidy.task_rates(counts), by=by, metric=metric, level=level, order=order)


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
            if column == "window":  # every table has a window: the pooled one is the default
                counts = counts.assign(window=_tidy.DEFAULT_WINDOW)
    return counts


def compare_rates(
    rates: pd.DataFrame,
    *,
    by: str,
    metric: str = "score",
    level: float = 0.95,
    order: Sequence[str] | None = None,
) -> Comparison:
    """`compare` on per-task rates (`_tidy.task_rates`), which summarize computes once."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {sorted(METRICS)}, not {metric!r}")
    if by not in rates.columns or by == "task":
        raise ValueError(f"cannot compare by {by!r}: not an identity column of the trial table")
    within_cols = [c for c in _tidy.identity_columns(rates) if c != by]
    order = list(order) if order is not None else sorted(set(rates[by]))
    pairs: list[PairedComparison] = []
    for key, group in _groups(rates, within_cols):
        within = tuple(zip(within_cols, key, strict=True))
        seen = set(group[by])
        present = [o for o in order if o in seen]
        pairs.extend(_compare_group(TaskMatrix.of(group, by, present, metric), within, level))
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


@dataclass(frozen=True, slots=True)
class TaskMatrix:
    """One metric of several configurations on their tasks: `values` (configurations × tasks) is
    NaN where the task did not run or the metric is undefined there; `trials` is 0 where the task
    did not run."""

    by: str
    metric: str
    labels: tuple[str, ...]
    tasks: tuple[str, ...]
    values: FloatArray
    trials: NDArray[np.int64]

    @classmethod
    def of(cls, rates: pd.DataFrame, by: str, labels: Sequence[str], metric: str) -> TaskMatrix:
        """From per-task rates of one group (`_tidy.task_rates`), rows in the order of `labels`."""
        column = METRICS[metric]
        wide = rates.pivot(index=by, columns="task", values=[column, "n_trials"])
        wide = wide.reindex(list(labels))
        values = wide[column].to_numpy(float)
        trials = wide["n_trials"].fillna(0).to_numpy(np.int64)
        tasks = tuple(str(t) for t in wide[column].columns)
        return cls(by, metric, tuple(labels), tasks, values, trials)


def paired_estimates(
    a: FloatArray, b: FloatArray, level: float = 0.95
) -> tuple[PairedEstimate, ...]:
    """`paired_difference` for each row of two aligned (pairs × tasks) arrays at once."""
    keep = ~(np.isnan(a) | np.isnan(b))
    n = keep.sum(axis=1)
    a0, b0 = np.where(keep, a, 0.0), np.where(keep, b, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_a, mean_b = a0.sum(axis=1) / n, b0.sum(axis=1) / n
        ca, cb = (
            np.where(keep, a0 - mean_a[:, None], 0.0),
            np.where(keep, b0 - mean_b[:, None], 0.0),
        )
        diff = mean_a - mean_b
        var_d = ((ca - cb) ** 2).sum(axis=1) / (n - 1)
        se = np.where(n > 1, np.sqrt(var_d / n), np.nan)
        ssa, ssb = (ca * ca).sum(axis=1), (cb * cb).sum(axis=1)
        corr = np.where(
            (n > 2) & (ssa > 0) & (ssb > 0), (ca * cb).sum(axis=1) / np.sqrt(ssa * ssb), np.nan
        )
    half = z_value(level) * se
    return tuple(
        PairedEstimate(
            float(diff[i]),
            float(se[i]),
            (float(diff[i] - half[i]), float(diff[i] + half[i])),
            float(mean_a[i]),
            float(mean_b[i]),
            float(corr[i]),
            int(n[i]),
        )
        for i in range(n.size)
    )


def _compare_group(
    matrix: TaskMatrix, within: tuple[tuple[str, str], ...], level: float
) -> list[PairedComparison]:
    """Every pair (labels[i], labels[j]), i < j, of one group."""
    ia, ib = np.triu_indices(len(matrix.labels), 1)
    return compare_pairs(matrix, list(zip(ia.tolist(), ib.tolist(), strict=True)), within, level)


def compare_pairs(
    matrix: TaskMatrix,
    pairs: Sequence[tuple[int, int]],
    within: tuple[tuple[str, str], ...],
    level: float,
) -> list[PairedComparison]:
    """The pairs (row a, row b) of `matrix`, a − b, with their p-values; `p_holm` is left NaN
    for the caller to adjust over its family."""
    if not pairs:
        return []
    ia, ib = (np.array(side, dtype=np.int64) for side in zip(*pairs, strict=True))
    estimates = paired_estimates(matrix.values[ia], matrix.values[ib], level)
    out = []
    for i, j, estimate in zip(ia.tolist(), ib.tolist(), estimates, strict=True):
        ran_a, ran_b = matrix.trials[i] > 0, matrix.trials[j] > 0
        common = ran_a & ran_b
        d = (matrix.values[i] - matrix.values[j])[common]
        p_value, method = _pvalue(
            matrix.trials[i][common], matrix.trials[j][common], d, matrix.metric
        )
        out.append(
            PairedComparison(
                matrix.by,
                matrix.labels[i],
                matrix.labels[j],
                within,
                matrix.metric,
                clip_rate_difference(estimate),
                p_value,
                method,
                math.nan,
                _names(matrix.tasks, ran_a & ~ran_b),
                _names(matrix.tasks, ran_b & ~ran_a),
            )
        )
    return out


def _names(tasks: tuple[str, ...], mask: NDArray[np.bool_]) -> tuple[str, ...]:
    return tuple(tasks[k] for k in np.flatnonzero(mask))


def _pvalue(
    trials_a: NDArray[np.int64], trials_b: NDArray[np.int64], d: FloatArray, metric: str
) -> tuple[float, str]:
    """McNemar when both sides have exactly one trial per task and the metric is binary per trial;
    otherwise the sign-flip permutation test."""
    single = bool((trials_a == 1).all() and (trials_b == 1).all())
    if single and metric != "clean_score" and d.size:
        return mcnemar_pvalue(int(np.sum(d > 0)), int(np.sum(d < 0))), "McNemar exact"
    return sign_flip_pvalue(d)
