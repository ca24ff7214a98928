"""Measured variances → how many tasks (and repeats) a comparison needs to see a given gap.

Miller 2024 (arXiv 2411.00640, sec. 5) for a paired comparison of two configurations on n tasks
with K repeats each: the mean per-task difference has variance `(Var_task_diff + E[σ²]/K) / n`,
where Var_task_diff is the between-task variance of the true per-task differences and
E[σ²] = E[σ²_a] + E[σ²_b] the repeat (within-task) variance of one trial on each side. Detecting a
gap δ at two-sided level α with power 1 − β needs

    n = (z_{1−α/2} + z_{1−β})² · (Var_task_diff + E[σ²]/K) / δ².

The variances come from the run. A run with several configurations measures Var_task_diff directly
on its pairs; the pair needing the most tasks is used (the hardest comparison the run holds). A run
with one configuration cannot see the pairing, so the two sides are assumed independent
(Var_task_diff = 2·Var_task, E[σ²] = 2·E[σ²_one]): conservative, since pairing only helps when the
per-task scores correlate positively, as they do across policies and agents in practice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from scipy import special

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import FloatArray, VarianceComponents, components_from_sums

REPEATS = (1, 2, 3, 5, 10)


@dataclass(frozen=True, slots=True)
class PowerRow:
    """At `repeats` per task: tasks needed, and trials per configuration (tasks × repeats)."""

    repeats: int
    tasks: float
    trials: float


@dataclass(frozen=True, slots=True)
class PowerAnalysis:
    gap: float
    alpha: float
    power: float
    var_task_diff: float
    mean_within_var: float
    measured_tasks: int
    measured_repeats: float
    tasks_needed: float
    source: str
    rows: tuple[PowerRow, ...]


def required_tasks(
    gap: float,
    var_task_diff: float,
    mean_within_var: float,
    repeats: float,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """Miller's sample size (see the module docstring); a negative moment estimate of
    Var_task_diff is taken as 0. NaN when a variance is unknown or the gap is not positive."""
    if not gap > 0:
        return math.nan
    z = _z_sum(alpha, power)
    return float(z * z * _task_variance(var_task_diff, mean_within_var, repeats) / gap**2)


def detectable_gap(
    var_task_diff: float,
    mean_within_var: float,
    repeats: float,
    n_tasks: float,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """The smallest gap `n_tasks` tasks of `repeats` each detect: Miller's sample size solved
    for the gap, δ = (z_{1−α/2} + z_{1−β}) · sqrt((Var_task_diff + E[σ²]/K) / n). `repeats`
    may be inf: the floor that no number of repeats can lower, set by the tasks alone."""
    if not n_tasks > 0:
        return math.nan
    variance = _task_variance(var_task_diff, mean_within_var, repeats)
    return float(_z_sum(alpha, power) * math.sqrt(variance / n_tasks))


def _z_sum(alpha: float, power: float) -> float:
    return float(special.ndtri(1 - alpha / 2) + special.ndtri(power))


def _task_variance(var_task_diff: float, mean_within_var: float, repeats: float) -> float:
    """Variance of one task's paired difference at K repeats; a negative moment estimate of
    Var_task_diff is taken as 0, an unknown one (K = 1 everywhere) stays NaN."""
    within = 0.0 if math.isinf(repeats) else mean_within_var / repeats
    return (math.nan if math.isnan(var_task_diff) else max(0.0, var_task_diff)) + within


def paired_variances(
    passed_a: FloatArray, trials_a: FloatArray, passed_b: FloatArray, trials_b: FloatArray
) -> tuple[float, float]:
    """(Var_task_diff, E[σ²]) of a paired comparison from per-task passes and trials on common
    tasks: the variance of the per-task differences less the repeat noise each side adds, and
    the two sides' repeat variances of one trial summed."""
    d = passed_a / trials_a - passed_b / trials_b
    ca = components_from_sums(passed_a, passed_a, trials_a)  # binary: sum of y² = sum of y
    cb = components_from_sums(passed_b, passed_b, trials_b)
    var_diff = float(d.var(ddof=1)) - ca.mean_within_var_over_k - cb.mean_within_var_over_k
    return var_diff, ca.mean_within_var + cb.mean_within_var


def power_analysis(
    trials: pd.DataFrame,
    *,
    gap: float,
    alpha: float = 0.05,
    power: float = 0.8,
    by: str = "policy",
    repeats: Sequence[int] = REPEATS,
) -> PowerAnalysis:
    """Sample sizes for detecting `gap` (0.02 = 2 points) with the variances this run measured.
    With K = 1 everywhere the repeat variance is not identifiable: only the K = 1 row is given."""
    lean = _tidy.check_trials(trials)
    rates = _tidy.task_rates(_tidy.task_counts(lean))
    sources = _pair_sources(rates, by) or _single_sources(rates)
    if not sources:
        raise ValueError("no configuration with at least two tasks to measure variances on")
    chosen = max(sources, key=lambda s: _nan_low(s.tasks_needed(gap, s.repeats, alpha, power)))
    rows = tuple(
        PowerRow(r, *_tasks_and_trials(chosen.tasks_needed(gap, r, alpha, power), r))
        for r in repeats
    )
    return PowerAnalysis(
        gap=gap,
        alpha=alpha,
        power=power,
        var_task_diff=chosen.var_task_diff,
        mean_within_var=chosen.mean_within_var,
        measured_tasks=chosen.n_tasks,
        measured_repeats=chosen.repeats,
        tasks_needed=chosen.tasks_needed(gap, chosen.repeats, alpha, power),
        source=chosen.label,
        rows=rows,
    )


@dataclass(frozen=True, slots=True)
class _Source:
    """Variances measured on one pair (or one configuration): `total` = Var(d) at K measured."""

    label: str
    var_task_diff: float
    mean_within_var: float
    total: float
    n_tasks: int
    repeats: float

    def tasks_needed(self, gap: float, repeats: float, alpha: float, power: float) -> float:
        if math.isnan(self.mean_within_var) and repeats == self.repeats:
            return required_tasks(gap, self.total, 0.0, repeats, alpha, power)
        return required_tasks(gap, self.var_task_diff, self.mean_within_var, repeats, alpha, power)


def _nan_low(x: float) -> float:
    return -math.inf if math.isnan(x) else x


def _tasks_and_trials(n: float, repeats: int) -> tuple[float, float]:
    if math.isnan(n):
        return math.nan, math.nan
    tasks = float(math.ceil(n))
    return tasks, tasks * repeats


def _components(side: pd.DataFrame) -> VarianceComponents:
    passes = side["n_passed"].to_numpy(float)  # score is binary: sum of y² = sum of y
    return components_from_sums(passes, passes, side["n_trials"].to_numpy(float))


def _pair_sources(rates: pd.DataFrame, by: str) -> list[_Source]:
    within_cols = [c for c in _tidy.identity_columns(rates) if c != by]
    out = []
    for key, group in rates.groupby(within_cols, sort=True):
        labels = sorted(set(group[by]))
        sides = {v: group[group[by] == v].set_index("task") for v in labels}
        for a, b in itertools.combinations(labels, 2):
            common = sides[a].index.intersection(sides[b].index).sort_values()
            if len(common) >= 2:
                name = f"{a} vs {b} ({', '.join(map(str, _key(key)))})"
                out.append(_pair_source(name, sides[a].loc[common], sides[b].loc[common]))
    return out


def _pair_source(name: str, sa: pd.DataFrame, sb: pd.DataFrame) -> _Source:
    d = sa["score"].to_numpy(float) - sb["score"].to_numpy(float)
    var_diff, within = paired_variances(
        *(side[c].to_numpy(float) for side in (sa, sb) for c in ("n_passed", "n_trials"))
    )
    k = float(pd.concat([sa["n_trials"], sb["n_trials"]]).mean())
    return _Source(name, var_diff, within, float(d.var(ddof=1)), len(d), k)


def _single_sources(rates: pd.DataFrame) -> list[_Source]:
    out = []
    for key, group in rates.groupby(_tidy.identity_columns(rates), sort=True):
        if len(group) >= 2:
            c = _components(group)
            name = f"{', '.join(map(str, _key(key)))} alone (sides assumed independent)"
            out.append(
                _Source(
                    name, 2 * c.var_task, 2 * c.mean_within_var, 2 * c.total, len(group), c.repeats
                )
            )
    return out


def _key(key: object) -> tuple[object, ...]:
    """Group key as a tuple, without the default window (noise in a label)."""
    values = key if isinstance(key, tuple) else (key,)
    return tuple(v for v in values if v != _tidy.DEFAULT_WINDOW)
