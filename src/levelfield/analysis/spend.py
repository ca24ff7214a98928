"""Trial table → what the sweep cost: tokens and dollars per configuration and in all.

Reads the `tokens_in`, `tokens_out` and `cost_usd` columns (analysis/table.py) that the store's
records carry (model_api/cost.py). A configuration whose trials carry tokens but no price shows
its tokens and an unknown cost: a blank, never a misleading $0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from levelfield.analysis import _tidy


@dataclass(frozen=True, slots=True)
class ConfigCost:
    labels: dict[str, str]
    n_trials: int
    tokens_in: int
    tokens_out: int
    cost_usd: float  # NaN when some trial with tokens had no price
    cost_per_trial_usd: float


@dataclass(frozen=True, slots=True)
class SweepCost:
    configs: tuple[ConfigCost, ...]
    total_usd: float
    tokens_in: int
    tokens_out: int
    n_trials: int


def sweep_cost(trials: pd.DataFrame) -> SweepCost | None:
    """None when no trial carries tokens (agents that call no model)."""
    if "tokens_in" not in trials.columns or trials["tokens_in"].isna().all():
        return None
    keys = [c for c in ("agent", "policy", "window") if c in trials.columns]
    configs = []
    for key, group in trials.groupby(keys, sort=True, observed=True):
        labels = dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
        labels = {k: str(v) for k, v in labels.items() if v != _tidy.DEFAULT_WINDOW}
        configs.append(_config_cost(labels, group))
    return SweepCost(
        tuple(configs),
        _total(pd.Series([c.cost_usd for c in configs])),
        sum(c.tokens_in for c in configs),
        sum(c.tokens_out for c in configs),
        len(trials),
    )


def _config_cost(labels: dict[str, str], group: pd.DataFrame) -> ConfigCost:
    tokens = group["tokens_in"].notna() | group["tokens_out"].notna()
    priced = group["cost_usd"].notna()
    cost = float(group["cost_usd"].sum()) if bool((priced | ~tokens).all()) else math.nan
    n = len(group)
    return ConfigCost(
        labels,
        n,
        int(group["tokens_in"].fillna(0).sum()),
        int(group["tokens_out"].fillna(0).sum()),
        cost,
        cost / n if n else math.nan,
    )


def _total(costs: pd.Series) -> float:
    return math.nan if costs.isna().any() else float(costs.sum())
