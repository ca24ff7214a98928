"""Trial table → every figure of a run, in one frozen structure (the reports only format it).

Per configuration (agent × policy × window, and run when runs are stacked): `score` (infra errors
count as failures: the leaderboard convention), `clean_score` (infra errors left out) and
`infra_error_rate`, each a task-clustered mean with its analytic CI, a seeded cluster-bootstrap CI,
and the Wilson interval of the plain proportion over trials. Then the paired comparisons, the
noise/capability decomposition, the resource-sensitive tasks, the calibration across ceilings and
the hidden-variable check. Nothing here reads the store or prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from levelfield.analysis import _tidy, jsonable
from levelfield.analysis.calibration import MARGIN, Calibration, calibrate_rates
from levelfield.analysis.decomposition import Decomposition, decompose_policies
from levelfield.analysis.estimators import (
    N_RESAMPLES,
    Estimate,
    bootstrap_means,
    clipped,
    mean_of_tasks,
    percentile_ci,
    wilson_interval,
)
from levelfield.analysis.hidden import HiddenVariables, hidden_variables
from levelfield.analysis.nodes import NodeHealth, node_health
from levelfield.analysis.paired import Comparison, compare_rates
from levelfield.analysis.sensitivity import TaskSensitivity, task_sensitivity
from levelfield.analysis.strategy import strategy_kills
from levelfield.analysis.windows import TimeBreakdown, time_breakdown

_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


@dataclass(frozen=True, slots=True)
class Metric:
    """One outcome variable of one configuration: the clustered estimate and two other intervals."""

    estimate: Estimate
    boot_ci: tuple[float, float]
    wilson_ci: tuple[float, float]


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    """Peak memory as a multiple of the task's spec, over trials: quantiles p5, p25, p50, p75,
    p95 and max, and the share of trials that went above their spec."""

    quantiles: tuple[float, ...]
    share_over_spec: float
    n_trials: int


@dataclass(frozen=True, slots=True)
class ConfigSummary:
    """`labels` are the identity columns (agent, policy, window, and run when stacked)."""

    labels: dict[str, str]
    ceiling: float
    score: Metric
    clean_score: Metric
    infra_error_rate: Metric
    n_tasks: int
    n_trials: int
    repeats: tuple[int, int]
    reasons: dict[str, int]
    memory: MemoryProfile | None
    killed_cause_unknown: int = 0  # SIGKILLed with no evidence of why (imports: beside.py)


@dataclass(frozen=True, slots=True)
class Provenance:
    """What the trial rows themselves say about where and when they ran (for the card)."""

    first_started_at: str | None
    last_started_at: str | None
    hosts: tuple[str, ...]
    backends: tuple[str, ...]
    concurrency: tuple[int, ...]
    images: tuple[str, ...] = ()  # "pulled 3, built 1" style counts of trials per image source
    image_drift: tuple[str, ...] = ()  # a prebuilt tag seen at several digests in this run


@dataclass(frozen=True, slots=True)
class RunSummary:
    info: dict[str, Any]
    level: float
    seed: int
    n_resamples: int
    margin: float
    configs: tuple[ConfigSummary, ...]
    comparisons: tuple[Comparison, ...]
    decompositions: tuple[Decomposition, ...]
    sensitivity: tuple[TaskSensitivity, ...]
    calibration: tuple[Calibration, ...]
    hidden: HiddenVariables | None
    provenance: Provenance
    time: TimeBreakdown | None = None  # by hour of day and by window; do the windows differ?
    nodes: tuple[NodeHealth, ...] = ()  # health readings per node, far-off ones flagged

    def to_json(self) -> str:
        return jsonable.dumps(self)


def summarize(
    trials: pd.DataFrame,
    *,
    info: Mapping[str, Any] | None = None,
    level: float = 0.95,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    margin: float = MARGIN,
) -> RunSummary:
    """All figures of a run. `info` is the run's metadata (see RunData.info); any key may miss.

    One BLAS thread throughout: the products here (bootstrap weights, the hidden-variable fit)
    are small, and on a loaded 2-core host OpenBLAS's threads only spin (5-30x slower, measured).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        return _summarize(trials, info, level, n_resamples, seed, margin)


def _summarize(
    trials: pd.DataFrame,
    info: Mapping[str, Any] | None,
    level: float,
    n_resamples: int,
    seed: int,
    margin: float,
) -> RunSummary:
    lean = _tidy.check_trials(trials)
    ceilings = _tidy.policy_ceilings(trials)
    order = _tidy.policy_order(ceilings)
    rates = _tidy.task_rates(_tidy.task_counts(lean))
    configs = _configs(trials, lean, rates, ceilings, order, (level, n_resamples, seed))
    comparisons = tuple(
        compare_rates(rates, by=by, level=level, order=_order(by, order, rates))
        for by in _tidy.identity_columns(lean)
        if rates[by].nunique() > 1
    )
    return RunSummary(
        info=dict(info or {}),
        level=level,
        seed=seed,
        n_resamples=n_resamples,
        margin=margin,
        configs=configs,
        comparisons=comparisons,
        decompositions=decompose_policies(
            rates,
            order,
            strategy=strategy_kills(trials, order),
            level=level,
            n_resamples=n_resamples,
            seed=seed,
        ),
        sensitivity=task_sensitivity(trials, order),
        calibration=calibrate_rates(rates, ceilings, margin=margin, alpha=1 - level),
        hidden=hidden_variables(trials, level=level, seed=seed),
        provenance=_provenance(trials),
        time=time_breakdown(trials, level=level, seed=seed),
        nodes=node_health(trials),
    )


def _order(by: str, policy_order: list[str], rates: pd.DataFrame) -> list[str]:
    """Pairs read "looser − tighter" for policies; other labels in sorted order."""
    return list(reversed(policy_order)) if by == "policy" else sorted(set(rates[by]))


def _configs(
    trials: pd.DataFrame,
    lean: pd.DataFrame,
    rates: pd.DataFrame,
    ceilings: dict[str, float],
    order: list[str],
    settings: tuple[float, int, int],
) -> tuple[ConfigSummary, ...]:
    keys = _tidy.identity_columns(lean)
    reasons = _reasons(trials, lean, keys)
    memory = _memory(trials, lean, keys)
    rank = {p: i for i, p in enumerate(order)}
    out = []
    killed = _killed(trials, lean, keys)
    for key, group in rates.groupby(keys, sort=True):
        labels = dict(zip(keys, key, strict=True))
        ceiling = ceilings.get(labels["policy"], math.nan)
        config = _config(labels, ceiling, group, settings, reasons.get(key, {}), memory.get(key))
        out.append(replace(config, killed_cause_unknown=killed.get(key, 0)))
    return tuple(
        sorted(
            out, key=lambda c: [rank.get(v, 0) if k == "policy" else v for k, v in c.labels.items()]
        )
    )


def _config(
    labels: dict[str, str],
    ceiling: float,
    group: pd.DataFrame,
    settings: tuple[float, int, int],
    reasons: dict[str, int],
    memory: MemoryProfile | None,
) -> ConfigSummary:
    level, n_resamples, seed = settings
    n, passed, infra = (int(group[c].sum()) for c in ("n_trials", "n_passed", "n_infra"))
    columns = ["score", "clean", "infra_rate"]
    boot = bootstrap_means(group[columns].to_numpy(), n_resamples, seed)
    trial_counts = (n, n - infra, n)
    successes = (passed, passed, infra)
    metrics = [
        Metric(
            clipped(mean_of_tasks(group[c].to_numpy(), level, trial_counts[i])),
            percentile_ci(boot[:, i], level),
            wilson_interval(successes[i], trial_counts[i], level),
        )
        for i, c in enumerate(columns)
    ]
    repeats = (int(group["n_trials"].min()), int(group["n_trials"].max()))
    return ConfigSummary(
        labels=labels,
        ceiling=ceiling,
        score=metrics[0],
        clean_score=metrics[1],
        infra_error_rate=metrics[2],
        n_tasks=len(group),
        n_trials=n,
        repeats=repeats,
        reasons=reasons,
        memory=memory,
    )


def _reasons(
    trials: pd.DataFrame, lean: pd.DataFrame, keys: list[str]
) -> dict[tuple[str, ...], dict[str, int]]:
    """Counts of outcome reasons per configuration; the status stands in when `reason` is absent
    or empty."""
    status = trials["status"].astype(str).to_numpy()
    reason = status
    if "reason" in trials.columns:
        given = trials["reason"].astype("string").fillna("").to_numpy(str)
        reason = np.where(given == "", status, given)
    frame = lean[keys].assign(reason=reason)
    counts = frame.groupby([*keys, "reason"], sort=True, observed=True).size()
    out: dict[tuple[str, ...], dict[str, int]] = {}
    for index, count in counts.items():
        out.setdefault(tuple(index[:-1]), {})[str(index[-1])] = int(count)
    return out


def _killed(trials: pd.DataFrame, lean: pd.DataFrame, keys: list[str]) -> dict[tuple, int]:
    """Trials per configuration whose agent was killed with no evidence of the cause."""
    if "killed_cause_unknown" not in trials.columns:
        return {}
    flags = trials["killed_cause_unknown"].fillna(False).astype(bool).to_numpy()
    counts = lean[keys][flags].groupby(keys, sort=True, observed=True).size()
    return {(k if isinstance(k, tuple) else (k,)): int(n) for k, n in counts.items() if n}


def _memory(
    trials: pd.DataFrame, lean: pd.DataFrame, keys: list[str]
) -> dict[tuple[str, ...], MemoryProfile]:
    if not {"peak_memory_bytes", "memory_spec_bytes"} <= set(trials.columns):
        return {}
    peak = pd.to_numeric(trials["peak_memory_bytes"], errors="coerce").to_numpy(float)
    spec = pd.to_numeric(trials["memory_spec_bytes"], errors="coerce").to_numpy(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(spec > 0, peak / spec, np.nan)
    frame = lean[keys].assign(ratio=ratio).dropna()
    out = {}
    for key, group in frame.groupby(keys, sort=True, observed=True):
        values = group["ratio"].to_numpy()
        quantiles = tuple(float(q) for q in np.quantile(values, _QUANTILES))
        out[tuple(key)] = MemoryProfile(quantiles, float(np.mean(values > 1)), int(values.size))
    return out


def _provenance(trials: pd.DataFrame) -> Provenance:
    def distinct(column: str) -> tuple[str, ...]:
        if column not in trials.columns:
            return ()
        return tuple(sorted(str(v) for v in pd.unique(trials[column].dropna())))

    started: list[str | None] = [None, None]
    if "started_at" in trials.columns:
        stamps = trials["started_at"].dropna().astype(str)  # ISO 8601 UTC sorts as text
        started = [stamps.min(), stamps.max()] if len(stamps) else started
    concurrency: tuple[int, ...] = ()
    if "concurrency" in trials.columns:
        values = pd.to_numeric(trials["concurrency"], errors="coerce").dropna()
        concurrency = tuple(sorted(int(v) for v in pd.unique(values)))
    images, drift = _images(trials)
    return Provenance(
        started[0],
        started[1],
        distinct("host_id"),
        distinct("backend"),
        concurrency,
        images,
        drift,
    )


_IMAGE_SOURCE = {
    "built": "built from environment/",
    "pulled": "prebuilt, pulled",
    "present": "prebuilt",
}


def _images(trials: pd.DataFrame) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Which images the trials ran (prebuilt or built), and every prebuilt tag whose digest
    changed within the run: its trials did not all run the same environment."""
    if "image_source" not in trials.columns:
        return (), ()
    rows = trials.dropna(subset=["image_source"])
    counts = rows["image_source"].value_counts()
    images = tuple(
        f"{_IMAGE_SOURCE.get(str(source), source)}: {int(n)} trials"
        for source, n in sorted(counts.items())
    )
    prebuilt = rows[rows["image_source"] != "built"]
    drift = []
    for name, group in prebuilt.groupby("image", sort=True):
        ordered = group.sort_values("started_at") if "started_at" in group else group
        digests = list(dict.fromkeys(ordered["image_digest"].astype(str)))
        if len(digests) > 1:
            windows = sorted({str(w) for w in group.get("window", pd.Series(dtype=str))})
            where = f" (windows {', '.join(windows)})" if windows else ""
            drift.append(f"{name}: {' → '.join(d[:19] for d in digests)}{where}")
    return images, tuple(drift)
