"""Scores across memory ceilings → the largest ceiling that still measures the floor's benchmark.

Raising the ceiling removes infrastructure errors (good) and may let agents use heavier strategies
(a different benchmark). For each agent, the policy with the smallest ceiling is the reference; each
larger ceiling's score is compared with it, paired by task, by TOST (two one-sided tests): the two
are **equivalent** when the 90 % CI of the paired difference lies inside ±margin (TOST at α = 0.05
is exactly that), **different** when the CI lies wholly beyond the margin, else **inconclusive**.
The recommended ceiling is the largest one equivalent to the reference; when some comparison is
inconclusive we say how many tasks (at the measured repeats) or repeats (at the measured tasks)
would decide it if the true difference were 0, from the normal-approximation TOST sample size with
the measured variance of per-task differences (Chow, Shao & Wang 2008, sec. 3.2.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import VarianceComponents, components_from_sums
from levelfield.analysis.paired import clip_rate_difference, paired_difference

MARGIN = 0.02  # 2 points: the size of leaderboard gaps the ceilings must not create
ALPHA = 0.05
POWER = 0.8


@dataclass(frozen=True, slots=True)
class CeilingCheck:
    """One larger ceiling against the reference: `diff` = its score − the reference's."""

    policy: str
    ceiling: float
    diff: float
    ci90: tuple[float, float]
    p_tost: float
    verdict: str
    infra_error_rate: float
    n_tasks: int
    tasks_needed: float
    repeats_needed: float


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per agent (and window/run): the reference policy, each check, and the recommendation."""

    within: tuple[tuple[str, str], ...]
    reference: str
    reference_ceiling: float
    reference_infra_error_rate: float
    margin: float
    checks: tuple[CeilingCheck, ...]
    recommended: str
    verdict: str


def tost(diff: float, se: float, margin: float, alpha: float = ALPHA) -> tuple[float, str]:
    """(p-value, verdict) of two one-sided z-tests against ±margin. p = max of the two one-sided
    p-values; "different" when the (1 − 2α) CI excludes the whole ±margin band on one side.

    se = 0 means every task's difference was the same (e.g. 0 for every task when both policies
    met the same drawn behaviour and no trial changed outcome): no resampling of tasks can move
    the mean, the interval is the point, and the verdict is where that point lies."""
    if math.isnan(diff) or math.isnan(se) or se < 0:
        return math.nan, "inconclusive"
    if se == 0:
        inside = -margin < diff < margin
        return (0.0, "equivalent") if inside else (1.0, "different")
    p_lower = float(stats.norm.sf((diff + margin) / se))
    p_upper = float(stats.norm.cdf((diff - margin) / se))
    z = float(stats.norm.ppf(1 - alpha))
    lo, hi = diff - z * se, diff + z * se
    if -margin < lo and hi < margin:
        return max(p_lower, p_upper), "equivalent"
    if lo > margin or hi < -margin:
        return max(p_lower, p_upper), "different"
    return max(p_lower, p_upper), "inconclusive"


def tost_tasks_needed(
    var_diff: float, margin: float, alpha: float = ALPHA, power: float = POWER
) -> float:
    """Tasks for TOST to declare equivalence with probability `power` when the true difference is
    0: n = (z_{1−α} + z_{1−β/2})² · Var(d) / margin²."""
    z = stats.norm.ppf(1 - alpha) + stats.norm.ppf(1 - (1 - power) / 2)
    return float(z * z * var_diff / margin**2)


def calibrate(
    trials: pd.DataFrame, *, margin: float = MARGIN, alpha: float = ALPHA, power: float = POWER
) -> tuple[Calibration, ...]:
    """One Calibration per agent (and window/run) that ran at least two policies."""
    ceilings = _tidy.policy_ceilings(trials)
    return calibrate_rates(
        _tidy.rates_of(trials), ceilings, margin=margin, alpha=alpha, power=power
    )


def calibrate_rates(
    rates: pd.DataFrame,
    ceilings: dict[str, float],
    *,
    margin: float = MARGIN,
    alpha: float = ALPHA,
    power: float = POWER,
) -> tuple[Calibration, ...]:
    """`calibrate` on per-task rates (`_tidy.task_rates`) and the policies' ceilings."""
    order = _tidy.policy_order(ceilings)
    within_cols = [c for c in _tidy.identity_columns(rates) if c != "policy"]
    out = []
    for key, group in rates.groupby(within_cols, sort=True):
        present = [p for p in order if p in set(group["policy"])]
        if len(present) < 2:
            continue
        sides = {p: group[group["policy"] == p].set_index("task") for p in present}
        checks = tuple(
            _check(sides[present[0]], sides[p], p, ceilings[p], margin, alpha, power)
            for p in present[1:]
        )
        within = tuple(zip(within_cols, key if isinstance(key, tuple) else (key,), strict=True))
        reference_infra = float(sides[present[0]]["infra_rate"].mean())
        recommended, verdict = _recommend(present[0], checks)
        out.append(
            Calibration(
                within,
                present[0],
                ceilings[present[0]],
                reference_infra,
                margin,
                checks,
                recommended,
                verdict,
            )
        )
    return tuple(out)


def _check(
    reference: pd.DataFrame,
    side: pd.DataFrame,
    policy: str,
    ceiling: float,
    margin: float,
    alpha: float,
    power: float,
) -> CeilingCheck:
    common = reference.index.intersection(side.index).sort_values()
    ref, other = reference.loc[common], side.loc[common]
    estimate = clip_rate_difference(
        paired_difference(other["score"].to_numpy(), ref["score"].to_numpy(), 1 - 2 * alpha)
    )
    p_tost, verdict = tost(estimate.diff, estimate.se, margin, alpha)
    tasks, repeats = _needed(ref, other, margin, alpha, power, verdict)
    return CeilingCheck(
        policy,
        ceiling,
        estimate.diff,
        estimate.ci,
        p_tost,
        verdict,
        float(side["infra_rate"].mean()),
        estimate.n_tasks,
        tasks,
        repeats,
    )


def _needed(
    ref: pd.DataFrame, other: pd.DataFrame, margin: float, alpha: float, power: float, verdict: str
) -> tuple[float, float]:
    """(total tasks at the measured repeats, repeats per task at the measured tasks) for TOST to
    reach `power`. NaN when already decided or not estimable (K = 1 hides the repeat variance);
    inf when no number of repeats suffices because the between-task variance alone is too large.
    Repeats: solve Var_task_diff + (E[σ²_a] + E[σ²_b]) / K <= n · margin² / z² for K."""
    if verdict != "inconclusive" or len(ref) < 2:
        return math.nan, math.nan
    n = len(ref)
    var_diff = float(np.var(other["score"].to_numpy(float) - ref["score"].to_numpy(float), ddof=1))
    tasks = float(max(n, math.ceil(tost_tasks_needed(var_diff, margin, alpha, power))))
    parts = [_components(side) for side in (ref, other)]
    within = parts[0].mean_within_var + parts[1].mean_within_var
    if math.isnan(within):
        return tasks, math.nan
    between = max(0.0, var_diff - parts[0].mean_within_var_over_k - parts[1].mean_within_var_over_k)
    budget = n / tost_tasks_needed(1.0, margin, alpha, power)
    if budget <= between:
        return tasks, math.inf
    return tasks, float(max(1, math.ceil(within / (budget - between))))


def _components(side: pd.DataFrame) -> VarianceComponents:
    passes = side["n_passed"].to_numpy(float)  # binary outcome: sum of y² = sum of y
    return components_from_sums(passes, passes, side["n_trials"].to_numpy(float))


def _recommend(reference: str, checks: tuple[CeilingCheck, ...]) -> tuple[str, str]:
    equivalent = [c for c in checks if c.verdict == "equivalent"]
    if equivalent:
        best = max(equivalent, key=lambda c: (c.ceiling, -c.infra_error_rate))
        return best.policy, "equivalent"
    if any(c.verdict == "inconclusive" for c in checks):
        return reference, "inconclusive"
    return reference, "different"
