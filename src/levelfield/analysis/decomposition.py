"""A score change between two policies → noise removal + capability unlock.

`score = (1 − e) · c`: e is the infra error rate and c the clean score. Loosening a ceiling can
raise the score in two ways: fewer trials die of the infrastructure (e falls: **noise removal**),
or trials that run are solved more often because heavier strategies now fit (c rises:
**capability unlock**). Only the first leaves the benchmark measuring the same thing.

The split is the symmetric (Shapley, or midpoint) one, exact with no interaction remainder:
    noise_removal     = −Δe · (c1 + c2) / 2
    capability_unlock =  Δc · ((1 − e1) + (1 − e2)) / 2
    noise_removal + capability_unlock = (1 − e2)·c2 − (1 − e1)·c1 = Δscore.
For the identity to be exact on aggregates, c here is `score / (1 − e)` over the common tasks:
passes per clean trial with tasks weighted equally (with K equal per task, the pooled clean rate).
It can differ slightly from summary's `clean_score`, the mean of per-task clean rates, which leaves
out tasks that never ran cleanly. CIs: paired task-level cluster bootstrap on the common tasks.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import (
    N_RESAMPLES,
    FloatArray,
    bootstrap_means,
    percentile_ci,
)


@dataclass(frozen=True, slots=True)
class Decomposition:
    """Δscore from policy `before` to policy `after` and its two parts, each with a bootstrap CI.
    `within` names the fixed identity columns (agent, window, ...)."""

    within: tuple[tuple[str, str], ...]
    before: str
    after: str
    score: tuple[float, float]
    infra_error_rate: tuple[float, float]
    clean_score: tuple[float, float]
    delta_score: float
    delta_score_ci: tuple[float, float]
    noise_removal: float
    noise_removal_ci: tuple[float, float]
    capability_unlock: float
    capability_unlock_ci: tuple[float, float]
    n_tasks: int
    strategy_kills: int = 0
    strategy_tasks: tuple[str, ...] = ()


def split(
    s1: FloatArray, e1: FloatArray, s2: FloatArray, e2: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """(noise_removal, capability_unlock) from aggregate scores and infra rates; works elementwise
    on arrays of bootstrap replicates. NaN where every trial of one side was an infra error."""
    with np.errstate(invalid="ignore", divide="ignore"):
        c1 = np.where(e1 < 1, s1 / (1 - e1), np.nan)
        c2 = np.where(e2 < 1, s2 / (1 - e2), np.nan)
    noise = -(e2 - e1) * (c1 + c2) / 2
    unlock = (c2 - c1) * ((1 - e1) + (1 - e2)) / 2
    return noise, unlock


def decompose(
    per_task: FloatArray,
    *,
    labels: tuple[str, str] = ("before", "after"),
    within: tuple[tuple[str, str], ...] = (),
    level: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> Decomposition:
    """From an (n × 4) array of per-task [score_1, infra_1, score_2, infra_2] on common tasks:
    the aggregate parts and their paired bootstrap CIs (all four columns resampled together)."""
    values = np.asarray(per_task, float).reshape(-1, 4)
    s1, e1, s2, e2 = values.mean(axis=0) if values.size else np.full(4, math.nan)
    noise, unlock = split(np.array(s1), np.array(e1), np.array(s2), np.array(e2))
    boot = bootstrap_means(values, n_resamples, seed)
    b_noise, b_unlock = split(boot[:, 0], boot[:, 1], boot[:, 2], boot[:, 3])
    return Decomposition(
        within=within,
        before=labels[0],
        after=labels[1],
        score=(float(s1), float(s2)),
        infra_error_rate=(float(e1), float(e2)),
        clean_score=(_clean(s1, e1), _clean(s2, e2)),
        delta_score=float(s2 - s1),
        delta_score_ci=percentile_ci(boot[:, 2] - boot[:, 0], level),
        noise_removal=float(noise),
        noise_removal_ci=percentile_ci(b_noise, level),
        capability_unlock=float(unlock),
        capability_unlock_ci=percentile_ci(b_unlock, level),
        n_tasks=int(values.shape[0]),
    )


def _clean(score: float, infra: float) -> float:
    return float(score / (1 - infra)) if infra < 1 else math.nan


def decompose_policies(
    rates: pd.DataFrame,
    order: list[str],
    *,
    strategy: pd.DataFrame | None = None,
    level: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> tuple[Decomposition, ...]:
    """Each policy against its neighbour one step tighter, within every other identity combination:
    strict → 3x shows what headroom does, 3x → uncapped what removing the ceiling adds, and the
    steps sum to the whole change. `rates` is `_tidy.task_rates(...)`; `order` runs from the
    tightest ceiling to the loosest; `strategy` is `strategy.strategy_kills(...)`."""
    within_cols = [c for c in _tidy.identity_columns(rates) if c != "policy"]
    out = []
    for key, group in rates.groupby(within_cols, sort=True):
        within = tuple(zip(within_cols, key if isinstance(key, tuple) else (key,), strict=True))
        present = [p for p in order if p in set(group["policy"])]
        sides = {p: group[group["policy"] == p].set_index("task") for p in present}
        for before, after in itertools.pairwise(present):
            kills = _strategy_of(strategy, within, before, after)
            first = _reread(sides[before], kills)
            both = pd.merge(
                first[["score", "infra_rate"]],
                sides[after][["score", "infra_rate"]],
                how="inner",
                left_index=True,
                right_index=True,
                suffixes=("_1", "_2"),
            )
            found = decompose(
                both.sort_index().to_numpy(),
                labels=(before, after),
                within=within,
                level=level,
                n_resamples=n_resamples,
                seed=seed,
            )
            counted = kills[kills.index.isin(both.index)]
            out.append(
                replace(
                    found,
                    strategy_kills=int(counted.sum()),
                    strategy_tasks=tuple(sorted(str(t) for t in counted.index)),
                )
            )
    return tuple(out)


def _strategy_of(
    strategy: pd.DataFrame | None, within: tuple[tuple[str, str], ...], before: str, after: str
) -> pd.Series:
    """Trials per task at `before` whose kill is read as the agent's path for this step."""
    if strategy is None or strategy.empty:
        return pd.Series(dtype=int)
    mask = (strategy["before"] == before) & (strategy["after"] == after)
    for column, value in within:
        if column in strategy.columns:
            mask &= strategy[column].astype(str) == value
    rows = strategy[mask]
    return rows.groupby("task")["n_strategy"].sum().astype(int)


def _reread(side: pd.DataFrame, kills: pd.Series) -> pd.DataFrame:
    """`side` with those kills counted as failures: the score is unchanged (neither passes), the
    infra error rate falls by their share of the task's trials."""
    if kills.empty:
        return side
    n_kills = kills.reindex(side.index).fillna(0).to_numpy(float)
    return side.assign(infra_rate=side["infra_rate"] - n_kills / side["n_trials"].to_numpy(float))
