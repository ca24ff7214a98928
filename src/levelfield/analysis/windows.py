"""Trial table → score and infra-error rate by hour of day and by window; do the windows differ?

The breakdown pools every configuration: a sweep interleaves them in a seeded order, so each hour
and each window sees the same mix, and the pooled figure compares like with like. Each cell is a
task-clustered mean (tasks are the sampling unit) with its normal CI, beside the Wilson interval of
the plain proportion over trials.

Whether windows differ is tested per configuration, paired by task: only tasks run in every window
enter, each task's per-window scores are ranked within the task, and the statistic is Friedman's
(with its tie correction, as scipy computes it). Its p-value comes from the permutation
distribution of the ranks within each task (exact up to EXACT_MAX_ARRANGEMENTS arrangements,
seeded Monte Carlo above), which holds for few tasks and many ties where the χ² approximation
does not; the χ² p-value is given beside it as the textbook reference. Holm adjusts over the
configurations.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy import stats

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import Estimate, clipped, mean_of_tasks, wilson_interval
from levelfield.analysis.paired import holm

EXACT_MAX_ARRANGEMENTS = 50_000  # (k!)^n patterns; 3 windows × 6 tasks = 46 656
N_PERMUTATIONS = 10_000


@dataclass(frozen=True, slots=True)
class Slot:
    """One hour of day or one window, every configuration pooled."""

    label: str
    score: Estimate
    score_wilson: tuple[float, float]
    infra_error_rate: Estimate
    infra_wilson: tuple[float, float]
    n_trials: int


@dataclass(frozen=True, slots=True)
class WindowTest:
    """Do the windows differ for one configuration? Paired by task over `n_tasks` common tasks."""

    within: tuple[tuple[str, str], ...]
    windows: tuple[str, ...]
    n_tasks: int
    statistic: float  # Friedman's χ² on the per-task scores' within-task ranks
    p_value: float  # permutation of ranks within task
    method: str
    p_chi2: float  # the χ² approximation (scipy.stats.friedmanchisquare's)
    p_holm: float


@dataclass(frozen=True, slots=True)
class TimeBreakdown:
    by_hour: tuple[Slot, ...]
    by_window: tuple[Slot, ...]
    window_tests: tuple[WindowTest, ...]


def time_breakdown(trials: pd.DataFrame, *, level: float = 0.95, seed: int = 0) -> TimeBreakdown:
    lean = _tidy.check_trials(trials)
    by_hour: list[Slot] = []
    if "local_hour" in trials.columns:
        hours = pd.to_numeric(trials["local_hour"], errors="coerce").to_numpy(float)
        by_hour = _slots(lean, hours, level, fmt=lambda h: f"{int(h):02d}h")
    by_window = _slots(lean, lean["window"].astype(str).to_numpy(), level, fmt=str)
    return TimeBreakdown(tuple(by_hour), tuple(by_window), window_tests(trials, seed=seed))


def _slots(lean: pd.DataFrame, key: np.ndarray, level: float, fmt: object) -> list[Slot]:
    frame = pd.DataFrame(
        {"key": key, "task": lean["task"].astype(str).to_numpy(), "passed": lean["passed"],
         "infra": lean["infra"]}
    ).dropna(subset=["key"])
    out = []
    for value, group in frame.groupby("key", sort=True):
        per_task = group.groupby("task", sort=True)[["passed", "infra"]].mean()
        n = len(group)
        passed, infra = int(group["passed"].sum()), int(group["infra"].sum())
        out.append(
            Slot(
                label=fmt(value),  # type: ignore[operator]
                score=clipped(mean_of_tasks(per_task["passed"].to_numpy(float), level, n)),
                score_wilson=wilson_interval(passed, n, level),
                infra_error_rate=clipped(
                    mean_of_tasks(per_task["infra"].to_numpy(float), level, n)
                ),
                infra_wilson=wilson_interval(infra, n, level),
                n_trials=n,
            )
        )
    return out


def window_tests(trials: pd.DataFrame, *, seed: int = 0) -> tuple[WindowTest, ...]:
    """One test per configuration (agent × policy, and run) that ran in two or more windows."""
    lean = _tidy.check_trials(trials)
    if lean["window"].nunique() < 2:
        return ()
    rates = _tidy.task_rates(_tidy.task_counts(lean))
    within_keys = [c for c in _tidy.identity_columns(lean) if c != "window"]
    tests = []
    for key, group in rates.groupby(within_keys, sort=True):
        table = group.pivot(index="task", columns="window", values="score").dropna()
        if table.shape[1] < 2 or table.shape[0] < 2:
            continue
        key = key if isinstance(key, tuple) else (key,)
        statistic, p_value, method, p_chi2 = friedman_permutation(table.to_numpy(), seed=seed)
        tests.append(
            WindowTest(
                within=tuple(zip(within_keys, map(str, key), strict=True)),
                windows=tuple(str(c) for c in table.columns),
                n_tasks=int(table.shape[0]),
                statistic=statistic,
                p_value=p_value,
                method=method,
                p_chi2=p_chi2,
                p_holm=math.nan,
            )
        )
    adjusted = holm([t.p_value for t in tests])
    return tuple(replace(t, p_holm=float(p)) for t, p in zip(tests, adjusted, strict=True))


def friedman_statistic(ranks: np.ndarray) -> float:
    """Friedman's χ² with the tie correction, from within-row ranks (n tasks × k windows)."""
    n, k = ranks.shape
    column_sums = ranks.sum(axis=0)
    ssbn = float((column_sums**2).sum())
    ties = 0.0
    for row in ranks:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts**3 - counts).sum())
    correction = 1 - ties / (n * (k**3 - k))
    if correction <= 0:
        return math.nan  # every task scored the same in every window: nothing to rank
    return (12.0 / (n * k * (k + 1)) * ssbn - 3 * n * (k + 1)) / correction


def friedman_permutation(
    scores: np.ndarray, *, seed: int = 0, n_permutations: int = N_PERMUTATIONS
) -> tuple[float, float, str, float]:
    """(statistic, permutation p, method, χ² p) for a tasks × windows table of scores.

    Under H0 (windows exchangeable within a task) each task's ranks are equally likely in any
    order; the p-value is the share of such arrangements whose statistic reaches the observed.
    Permuting within rows keeps each row's ties, so the tie correction is the same for all."""
    ranks = np.apply_along_axis(stats.rankdata, 1, np.asarray(scores, float))
    n, k = ranks.shape
    observed = friedman_statistic(ranks)
    if math.isnan(observed):
        return math.nan, 1.0, "all tied", 1.0
    p_chi2 = float(stats.chi2.sf(observed, k - 1))
    # The statistic grows with the sum of squared column sums (the rest is fixed by n, k and the
    # ties, which a within-row permutation keeps): compare that, vectorised.
    target = float((ranks.sum(axis=0) ** 2).sum())
    tolerance = 1e-9 * max(1.0, target)
    if math.factorial(k) ** n <= EXACT_MAX_ARRANGEMENTS:
        orders = np.array(list(itertools.permutations(range(k))))
        sums = np.zeros((1, k))
        for row in ranks:
            sums = (sums[:, None, :] + row[orders][None, :, :]).reshape(-1, k)
        share = float(np.mean((sums**2).sum(axis=1) >= target - tolerance))
        return observed, share, "permutation exact", p_chi2
    rng = np.random.default_rng(seed)
    extreme, block = 0, max(1, 2_000_000 // (n * k))
    for start in range(0, n_permutations, block):
        rows = min(block, n_permutations - start)
        arranged = rng.permuted(np.broadcast_to(ranks, (rows, n, k)), axis=2)
        extreme += int(((arranged.sum(axis=1) ** 2).sum(axis=1) >= target - tolerance).sum())
    return observed, (1 + extreme) / (1 + n_permutations), "permutation Monte Carlo", p_chi2
