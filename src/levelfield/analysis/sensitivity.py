"""Trials under several policies → the tasks whose outcome depends on the policy, with evidence.

A task is resource-sensitive when its per-task score differs between policies for the same agent.
The ranking is by spread (max − min of the per-task score across policies): a task that always
passes uncapped and always dies at 1x tops the list. Beside each score sits what the kernel saw
under that policy (OOM kills, CPU throttled time, peak memory as a multiple of the task's spec), so
a reader can tell "needs more memory" from "flaky" without opening logs. Spread alone cannot tell
repeat noise from an effect; with K repeats a spread of 1/K can be one unlucky trial.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from levelfield.analysis import _tidy

# Optional evidence columns of the tidy table and how one (policy, task) cell summarises them.
_EVIDENCE = {
    "oom_kills": ("oom_kills", "sum"),
    "cpu_throttled_s": ("cpu_throttled_s", "mean"),
    "peak_over_spec": ("_peak_over_spec", "max"),
}


# TaskSensitivity field → column of the per-cell table.
_FIELDS = {
    "scores": "score",
    "infra_error_rates": "infra_rate",
    "oom_kills": "oom_kills",
    "cpu_throttled_s": "cpu_throttled_s",
    "peak_over_spec": "peak_over_spec",
}


@dataclass(frozen=True, slots=True)
class TaskSensitivity:
    """One task for one agent (and window/run): per-policy score and evidence, in policy order.
    Evidence is NaN when the table lacks its column."""

    within: tuple[tuple[str, str], ...]
    task: str
    spread: float
    scores: dict[str, float]
    infra_error_rates: dict[str, float]
    oom_kills: dict[str, float]
    cpu_throttled_s: dict[str, float]
    peak_over_spec: dict[str, float]


def task_sensitivity(
    trials: pd.DataFrame, order: list[str] | None = None
) -> tuple[TaskSensitivity, ...]:
    """Tasks whose score changes with the policy, most sensitive first (ties: more OOM kills,
    then task name). Tasks seen under one policy only cannot be judged and are left out."""
    lean = _tidy.check_trials(trials)
    order = order or _tidy.policy_order(_tidy.policy_ceilings(trials))
    within_cols = [c for c in _tidy.identity_columns(lean) if c != "policy"]
    wide = _cells(lean, trials).set_index([*within_cols, "task", "policy"]).unstack("policy")
    policies = [p for p in order if p in wide["score"].columns]
    scores = wide["score"].reindex(columns=policies).to_numpy(float)
    seen = (~np.isnan(scores)).sum(axis=1)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN rows: seen < 2 drops them
        spread = np.nanmax(scores, axis=1) - np.nanmin(scores, axis=1)
    rows = np.flatnonzero((seen >= 2) & (spread > 0))
    matrices = {
        name: wide[column].reindex(columns=policies).to_numpy(float)
        for name, column in _FIELDS.items()
    }
    found = []
    for i in rows:
        key = wide.index[i]
        defined = ~np.isnan(scores[i])
        fields = {
            name: {p: float(v) for p, v, d in zip(policies, m[i], defined, strict=True) if d}
            for name, m in matrices.items()
        }
        within = tuple(zip(within_cols, key[:-1], strict=True))
        found.append(TaskSensitivity(within, str(key[-1]), float(spread[i]), **fields))
    return tuple(sorted(found, key=_rank))


def _cells(lean: pd.DataFrame, trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (identity, task) with the score, infra rate and evidence summaries."""
    frame = lean.assign(score=lean["passed"], infra_rate=lean["infra"])
    aggregations: dict[str, tuple[str, str]] = {
        "score": ("score", "mean"),
        "infra_rate": ("infra_rate", "mean"),
    }
    for name, (column, how) in _EVIDENCE.items():
        values = _evidence_column(trials, column)
        if values is not None:
            frame[column] = values
            aggregations[name] = (column, how)
    keys = [*_tidy.identity_columns(lean), "task"]
    cells = frame.groupby(keys, sort=True, observed=True).agg(**aggregations).reset_index()
    for name in _EVIDENCE:
        if name not in cells.columns:
            cells[name] = math.nan
    return cells


def _evidence_column(trials: pd.DataFrame, column: str) -> np.ndarray | None:
    if column == "_peak_over_spec":
        if not {"peak_memory_bytes", "memory_spec_bytes"} <= set(trials.columns):
            return None
        peak = pd.to_numeric(trials["peak_memory_bytes"], errors="coerce").to_numpy(float)
        spec = pd.to_numeric(trials["memory_spec_bytes"], errors="coerce").to_numpy(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(spec > 0, peak / spec, np.nan)
    if column not in trials.columns:
        return None
    return pd.to_numeric(trials[column], errors="coerce").to_numpy(float)


def _rank(row: TaskSensitivity) -> tuple[float, float, str, tuple[tuple[str, str], ...]]:
    ooms = sum(v for v in row.oom_kills.values() if not math.isnan(v))
    return (-row.spread, -ooms, row.task, row.within)
