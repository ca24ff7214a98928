"""Trials under a ladder of ceilings → the OOM kills that were the agent's chosen path, not noise.

One trial cannot tell them apart: a kill is the ceiling's doing, so `classify()` books it as an
infra error, and the scores keep it so. Across policies the evidence can, as the sensitivity table
shows it: a transient spike is killed now and then and fits once the ceiling is raised; a heavier
strategy is killed on every trial at one ceiling and at every tighter one, and once the ceiling is
lifted it still needs more memory than the killing ceiling gave. For the decomposition of the step
`before → after`, a kill at `before` is read as the path's own demand when, for its cell (the
configuration, the task and, when the agent drew one per trial, the trajectory):

1. every trial of the cell was OOM-killed at `before` and at each tighter policy, and there is at
   least one tighter policy: a kill that headroom already failed to cure is no transient;
2. no trial of the cell was OOM-killed at `after`, and each peaked above `before`'s memory ceiling
   (as a multiple of the spec): the path needs that memory, it was not unlucky.

The first step of a ladder (strict → 3x) therefore books every kill as noise, as the
Terminal-Bench 2.0 study read it; a later step books a kill as noise unless both facts hold. The
rule errs towards noise: a cell with one surviving trial, or one peak under the ceiling, stays
noise.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from levelfield.analysis import _tidy

PATH = "trajectory"  # the tidy table's column naming what a population agent drew


def strategy_kills(trials: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """One row per (identity without policy, task, before, after) with `n_strategy` > 0: how many
    of the task's trials at `before` the decomposition of that step reads as the agent's path.
    Empty when the table lacks the reason, peak or ceiling columns."""
    needed = {"reason", "peak_memory_bytes", "memory_spec_bytes", "memory_ceiling_multiple"}
    lean = _tidy.check_trials(trials)
    within = [c for c in _tidy.identity_columns(lean) if c != "policy"]
    columns = [*within, "task", "before", "after", "n_strategy"]
    if not needed <= set(trials.columns):
        return pd.DataFrame(columns=columns)
    ceilings = _tidy.policy_ceilings(trials)
    wide = _cells(trials, lean, within).unstack("policy")
    policies = [p for p in order if p in wide["n"].columns]
    n, n_killed, min_ratio = (
        wide[field].reindex(columns=policies).to_numpy(float)
        for field in ("n", "n_killed", "min_ratio")
    )
    limit = np.array([ceilings.get(p, math.nan) for p in policies])
    rows = []
    for i, key in enumerate(wide.index):
        for before, after in _strategy_steps(n[i], n_killed[i], min_ratio[i], limit):
            rows.append(
                (*(str(k) for k in key[:-1]), policies[before], policies[after], n[i, before])
            )
    frame = pd.DataFrame(rows, columns=columns).astype({"n_strategy": int})
    keys = [*within, "task", "before", "after"]
    return frame.groupby(keys, sort=True, as_index=False)["n_strategy"].sum()[columns]


def _cells(trials: pd.DataFrame, lean: pd.DataFrame, within: list[str]) -> pd.DataFrame:
    """Per (identity, task, path, policy): trials, OOM kills, and the smallest peak / spec."""
    oom = (trials["reason"] == "oom_killed").to_numpy(bool)  # no string copy of a million rows
    peak = pd.to_numeric(trials["peak_memory_bytes"], errors="coerce").to_numpy(float)
    spec = pd.to_numeric(trials["memory_spec_bytes"], errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(spec > 0, peak / spec, np.nan)
    if PATH in trials.columns:
        path = pd.Categorical(trials[PATH].astype(object).where(trials[PATH].notna(), ""))
    else:
        path = pd.Categorical.from_codes(np.zeros(len(trials), int), [""])
    frame = lean[[*within, "task", "policy"]].assign(
        **{PATH: path}, killed=lean["infra"].to_numpy() & oom, ratio=ratio
    )
    grouped = frame.groupby([*within, "task", PATH, "policy"], sort=True, observed=True)
    return grouped.agg(n=("killed", "size"), n_killed=("killed", "sum"), min_ratio=("ratio", "min"))


def _strategy_steps(
    n: np.ndarray, n_killed: np.ndarray, min_ratio: np.ndarray, ceiling: np.ndarray
) -> list[tuple[int, int]]:
    """(before, after) positions among one cell's policies (NaN where it never ran) whose kills
    at `before` are the path's: killed on every trial at `before` and each tighter policy (at
    least one), never killed at `after` and above `before`'s ceiling on every trial there."""
    present = np.flatnonzero(~np.isnan(n))
    killed_all = n_killed == n
    found = []
    for i in range(1, len(present) - 1):
        before, after = present[i], present[i + 1]
        ladder = present[: i + 1]
        if (
            killed_all[ladder].all()
            and n_killed[after] == 0
            and not math.isnan(ceiling[before])
            and min_ratio[after] > ceiling[before]
        ):
            found.append((int(before), int(after)))
    return found
