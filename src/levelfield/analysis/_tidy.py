"""Tidy trial table → per-task counts.

Every estimator downstream works on counts: a task's K repeats under one configuration collapse to
(trials, passed, infra errors), so a million trials cost one groupby and the statistics then touch a
few thousand rows. A *configuration* is one value of each identity column present (`run`, `agent`,
`policy`, `window`, and `limits_disclosed` where a run varied it); `window` defaults to "default"
so single-window runs need not carry it.

The table may come from any harness: only `task, agent, policy, repeat, status` are required.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from levelfield.records import DEFAULT_WINDOW

REQUIRED = ("task", "agent", "policy", "repeat", "status")
STATUSES = frozenset({"passed", "failed", "infra_error"})
IDENTITY = ("run", "agent", "policy", "window", "limits_disclosed")
# Harness presets (docs/design.md "policy"), used to order policies when no ceiling column says how.
PRESET_RANK = {"strict": 0, "headroom": 1, "uncapped": 2}


def check_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """Validate the contract and return a lean frame: identity columns, `task`, `repeat`, and the
    booleans `passed` / `infra`. Raises ValueError naming what is wrong: a silently empty report
    would be worse than an error."""
    missing = [c for c in REQUIRED if c not in trials.columns]
    if missing:
        raise ValueError(f"trial table lacks required column(s): {', '.join(missing)}")
    status = trials["status"].astype(str)
    unknown = sorted(set(pd.unique(status)) - STATUSES)
    if unknown:
        raise ValueError(f"unknown status value(s) {unknown}; expected one of {sorted(STATUSES)}")
    if trials.empty:
        raise ValueError("trial table is empty: no trial to analyse")
    lean = pd.DataFrame(
        {c: _labels(trials[c], c) for c in identity_columns(trials) if c in trials.columns}
    )
    if "window" not in lean.columns:
        lean["window"] = pd.Categorical.from_codes(np.zeros(len(trials), int), [DEFAULT_WINDOW])
    lean["task"] = _labels(trials["task"], "task")
    lean["repeat"] = trials["repeat"]
    lean["passed"] = (status == "passed").to_numpy()
    lean["infra"] = (status == "infra_error").to_numpy()
    return lean


def _labels(column: pd.Series, name: str) -> pd.Series:
    """A categorical with string categories: factorised once, so the many groupbys downstream do
    not re-hash a million strings each (group with observed=True). A missing window is the
    default window; any other missing label is an error, since groupby would drop its rows."""
    if column.isna().any():
        if name != "window":
            raise ValueError(f"{int(column.isna().sum())} trial(s) have no {name!r}")
        column = column.astype(object).where(column.notna(), DEFAULT_WINDOW)
    labels = column.astype("category")
    return labels.cat.rename_categories([str(c) for c in labels.cat.categories])


def identity_columns(trials: pd.DataFrame) -> list[str]:
    """The columns that name a configuration, in IDENTITY order (`run` only when present)."""
    return [c for c in IDENTITY if c in trials.columns or c == "window"]


def task_counts(lean: pd.DataFrame) -> pd.DataFrame:
    """One row per (configuration, task): `n_trials`, `n_passed`, `n_infra`, sorted by the keys so
    that nothing downstream depends on the order of the input rows. Keys come back as plain str."""
    keys = [*identity_columns(lean), "task"]
    grouped = lean.groupby(keys, sort=True, observed=True)
    counts = grouped.agg(
        n_trials=("passed", "size"), n_passed=("passed", "sum"), n_infra=("infra", "sum")
    ).reset_index()
    return counts.astype(
        {k: str for k in keys} | {"n_trials": int, "n_passed": int, "n_infra": int}
    )


def pool(counts: pd.DataFrame, column: str) -> pd.DataFrame:
    """Counts with `column` (e.g. `run`) summed over: its configurations merged."""
    if column not in counts.columns:
        return counts
    keys = [c for c in counts.columns if c not in (column, "n_trials", "n_passed", "n_infra")]
    summed = counts.groupby(keys, sort=True)[["n_trials", "n_passed", "n_infra"]].sum()
    return summed.reset_index()


def rates_of(trials: pd.DataFrame) -> pd.DataFrame:
    """Shortcut: the per-task rates of a raw trial table."""
    return task_rates(task_counts(check_trials(trials)))


def policy_ceilings(trials: pd.DataFrame) -> dict[str, float]:
    """Memory ceiling (multiple of the spec) per policy; NaN when the column is absent. A policy's
    ceiling is one number by construction; the median guards against a stray row."""
    policy = _labels(trials["policy"], "policy")
    policies = sorted(str(p) for p in policy.cat.categories)
    if "memory_ceiling_multiple" not in trials.columns:
        return dict.fromkeys(policies, math.nan)
    multiple = pd.to_numeric(trials["memory_ceiling_multiple"], errors="coerce")
    by_policy = multiple.groupby(policy.to_numpy(), observed=True).median()
    return {p: float(by_policy.get(p, math.nan)) for p in policies}


def policy_order(ceilings: dict[str, float]) -> list[str]:
    """Policies from the tightest ceiling to the loosest (uncapped = inf last); presets by rank
    and then names when ceilings are unknown."""

    def key(policy: str) -> tuple[float, int, str]:
        ceiling = ceilings.get(policy, math.nan)
        return (math.inf if math.isnan(ceiling) else ceiling, PRESET_RANK.get(policy, 9), policy)

    return sorted(ceilings, key=key)


def task_rates(counts: pd.DataFrame) -> pd.DataFrame:
    """Per-task means of the three outcome variables. `clean` is NaN for a task whose every trial
    was an infra error: it has no clean trial to average."""
    n = counts["n_trials"].to_numpy(float)
    passed = counts["n_passed"].to_numpy(float)
    infra = counts["n_infra"].to_numpy(float)
    clean_n = n - infra
    with np.errstate(invalid="ignore", divide="ignore"):
        clean = np.where(clean_n > 0, passed / clean_n, np.nan)
    return counts.assign(score=passed / n, infra_rate=infra / n, clean=clean)
