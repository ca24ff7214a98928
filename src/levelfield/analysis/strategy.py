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

import itertools
import math

import numpy as np
import pandas as pd

from levelfield.analysis import _tidy

PATH = "trajectory"  # the tidy table's column naming what a population agent drew
STRATEGY_COLUMNS = ("before", "after", "task", "n_strategy")


def strategy_kills(trials: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """One row per (identity without policy, task, before, after) with `n_strategy` > 0: how many
    of the task's trials at `before` the decomposition of that step reads as the agent's path.
    Empty when the table lacks the reason, peak or ceiling columns."""
    needed = {"reason", "peak_memory_bytes", "memory_spec_bytes", "memory_ceiling_multiple"}
    lean = _tidy.check_trials(trials)
    within = [c for c in _tidy.identity_columns(lean) if c != "policy"]
    if not needed <= set(trials.columns):
        return pd.DataFrame(columns=[*within, *STRATEGY_COLUMNS])
    ceilings = _tidy.policy_ceilings(trials)
    cells = _cells(trials, lean, within)
    rows = []
    for key, cell in cells.groupby([*within, "task", PATH], sort=True, observed=True):
        found = _strategy_steps(cell.set_index("policy"), order, ceilings)
        rows += [(*key[:-1], before, after, n) for before, after, n in found]
    frame = pd.DataFrame(rows, columns=[*within, "task", "before", "after", "n_strategy"])
    return frame.groupby([*within, "task", "before", "after"], sort=True, as_index=False)[
        "n_strategy"
    ].sum()[[*within, *STRATEGY_COLUMNS]]


def _cells(trials: pd.DataFrame, lean: pd.DataFrame, within: list[str]) -> pd.DataFrame:
    """Per (identity, task, path, policy): trials, OOM kills, and the smallest peak / spec."""
    reason = trials["reason"].astype("string").fillna("").to_numpy(str)
    peak = pd.to_numeric(trials["peak_memory_bytes"], errors="coerce").to_numpy(float)
    spec = pd.to_numeric(trials["memory_spec_bytes"], errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(spec > 0, peak / spec, np.nan)
    path = (
        trials[PATH].astype("string").fillna("").to_numpy(str)
        if PATH in trials.columns
        else np.full(len(trials), "")
    )
    frame = (
        lean[[*within, "policy", "task"]]
        .astype(str)
        .assign(
            **{PATH: path}, killed=lean["infra"].to_numpy() & (reason == "oom_killed"), ratio=ratio
        )
    )
    return (
        frame.groupby([*within, "task", PATH, "policy"], sort=True, observed=True)
        .agg(n=("killed", "size"), n_killed=("killed", "sum"), min_ratio=("ratio", "min"))
        .reset_index()
    )


def _strategy_steps(
    cell: pd.DataFrame, order: list[str], ceilings: dict[str, float]
) -> list[tuple[str, str, int]]:
    present = [p for p in order if p in cell.index]
    found = []
    for i, (before, after) in enumerate(itertools.pairwise(present)):
        ladder = present[: i + 1]  # `before` and every tighter policy
        killed_throughout = all(cell.at[p, "n_killed"] == cell.at[p, "n"] for p in ladder)
        ceiling = ceilings.get(before, math.nan)
        needs_more = (
            cell.at[after, "n_killed"] == 0
            and not math.isnan(ceiling)
            and bool(cell.at[after, "min_ratio"] > ceiling)
        )
        if len(ladder) >= 2 and killed_throughout and needs_more:
            found.append((before, after, int(cell.at[before, "n"])))
    return found
