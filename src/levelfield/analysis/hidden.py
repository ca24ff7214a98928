"""Trials with host telemetry → do the hidden variables move the outcome? Hour of day, weekday,
trials in flight, host load, pressure stalls (cpu, memory, io), CPU steal, the trial's bandwidth
(as a quantile of the run's) and the model API's latency.

A sweep interleaves configurations in a seeded random order so that time and load are balanced
across them; this checks the remaining worry, that they move the outcome at all. Logistic
regression (statsmodels GLM, binomial) of `passed` on the covariates that vary in the data, with
configuration and task fixed effects, SEs clustered by task (trials of one task are correlated).

Fixed effects are estimable only for tasks (and configurations) whose outcomes vary: a task that
always passes has an infinite effect (perfect separation) and says nothing about the covariates
under conditional inference, so such tasks are dropped first and counted. Anything else that
separates is caught and reported "not estimable" instead of raising. `local_hour` enters linearly:
a trend across the day, not a cyclic pattern; `weekday` enters as one dummy per day against the
first. A covariate enters only when it was recorded for most trials (MIN_COVERAGE) and varies
enough to be fitted (MIN_VARIED_ROWS off its mode, and a p10–p90 spread of at least MIN_SPREAD
where one is set); the ones left out are named in `left_out`, with why. Large runs are
subsampled (seeded) so the dummy-coded design stays under MAX_CELLS cells; the row count used is
reported.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd
from statsmodels.genmod.families import Binomial
from statsmodels.genmod.generalized_linear_model import GLM
from statsmodels.tools.sm_exceptions import (
    ConvergenceWarning,
    PerfectSeparationError,
    PerfectSeparationWarning,
)
from statsmodels.tools.tools import add_constant
from threadpoolctl import threadpool_limits

from levelfield.analysis import _tidy
from levelfield.analysis.estimators import z_value

COVARIATES = (
    "local_hour",
    "trials_in_flight",
    "host_load1",
    "bandwidth_quantile",
    "cpu_pressure_pct",
    "memory_pressure_pct",
    "io_pressure_pct",
    "steal_pct",
    "api_latency_s",
)
CATEGORICAL = ("weekday",)
WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
# The smallest p10–p90 spread worth a coefficient, in each covariate's unit: below it the fit
# would read noise of the meter as an effect (a 0.2-point wobble of a stall share, say).
MIN_SPREAD = {
    "cpu_pressure_pct": 1.0,
    "memory_pressure_pct": 1.0,
    "io_pressure_pct": 1.0,
    "steal_pct": 0.5,
    "api_latency_s": 0.05,
}
# Bandwidth quantiles always span 0..1; the raw rates must differ by this factor (p90 / p10).
MIN_BANDWIDTH_RATIO = 1.2
MIN_COVERAGE = 0.8  # a covariate recorded for fewer trials would drop the others from the fit
MIN_ROWS = 30  # below this a clustered logit SE is not worth printing
MAX_CELLS = 1_000_000  # rows × design columns: 8 MB of float64, well under a second of IRLS
ROWS_PER_TASK = 50  # enough trials per task for its fixed effect; more buys little
# A covariate off its usual value in fewer trials than this (e.g. the last trial of a run, alone
# in flight) would be fitted on a handful of points: quasi-separation, not a finding.
MIN_VARIED_ROWS = 10
# Beyond this change in log-odds across a covariate's p10–p90 range (an odds ratio of 22,000),
# the fit has run off to infinity. Judged across the range, not per unit: a load that moves by
# 0.1 has a large per-unit coefficient for an ordinary effect.
MAX_ABS_LOG_ODDS = 10.0


@dataclass(frozen=True, slots=True)
class Coefficient:
    """Change in log-odds of passing per unit of the covariate (hour, trial in flight, load)."""

    name: str
    coef: float
    se: float
    ci: tuple[float, float]
    p_value: float
    odds_ratio: float


@dataclass(frozen=True, slots=True)
class HiddenVariables:
    estimable: bool
    note: str
    coefficients: tuple[Coefficient, ...]
    n_rows: int
    n_tasks: int
    dropped_tasks: int
    left_out: tuple[str, ...] = ()  # "steal_pct: barely varies (p10–p90 0.0–0.1)"


def hidden_variables(
    trials: pd.DataFrame, *, level: float = 0.95, seed: int = 0, max_cells: int = MAX_CELLS
) -> HiddenVariables | None:
    """None when no covariate column is present and varies (nothing to show); otherwise the fit,
    or `estimable=False` with the reason."""
    frame = _frame(trials)
    recorded = [c for c in (*COVARIATES, *CATEGORICAL) if c in frame.columns]
    if not any(frame[c].nunique() > 1 for c in recorded):
        return None
    kept, dropped = _informative(frame)
    covariates, left_out = _choose(kept, recorded, trials)
    kept = kept.dropna(subset=covariates)
    kept, dropped_more = _informative(kept)
    dropped += dropped_more
    n_tasks = int(kept["task"].nunique())
    if len(kept) < MIN_ROWS or n_tasks < 2 or not covariates:
        note = f"too few informative trials ({len(kept)} on {n_tasks} tasks whose outcome varies)"
        return HiddenVariables(False, note, (), len(kept), n_tasks, dropped, left_out)
    available = len(kept)
    kept, _ = _informative(_subsample(kept, len(covariates), max_cells, seed))
    kept = kept.sort_values(list(kept.columns), kind="stable")  # float sums independent of order
    try:
        coefficients, collinear, warned = _fit(kept, covariates, level)
    except (
        PerfectSeparationError,
        PerfectSeparationWarning,
        ConvergenceWarning,
        np.linalg.LinAlgError,
        ValueError,
    ) as exc:
        note = f"not estimable: {type(exc).__name__}: {exc}"
        return HiddenVariables(False, note, (), len(kept), n_tasks, dropped, left_out)
    note = (
        f"fit on a seeded subsample of {len(kept)} of {available} trials"
        if len(kept) < available
        else ""
    )
    note = " ".join(part for part in (note, *warned) if part)
    left_out += tuple(f"{name}: {COLLINEAR}" for name in collinear)
    return HiddenVariables(
        bool(coefficients),
        note or ("" if coefficients else f"every covariate recorded is {COLLINEAR}"),
        coefficients,
        len(kept),
        int(kept["task"].nunique()),
        dropped,
        left_out,
    )


def _frame(trials: pd.DataFrame) -> pd.DataFrame:
    """Covariates stay NaN where a trial did not record them; each fit drops rows only for the
    covariates it uses."""
    lean = _tidy.check_trials(trials)
    config = (
        lean.groupby(_tidy.identity_columns(lean), sort=True, observed=True).ngroup().to_numpy()
    )
    frame = pd.DataFrame(
        {
            "task": lean["task"].cat.codes.to_numpy(),
            "config": config,
            "repeat": lean["repeat"],
            "y": lean["passed"] * 1.0,
        }
    )
    for column in COVARIATES:
        source = "net_throughput_bps" if column == "bandwidth_quantile" else column
        if source in trials.columns:
            values = pd.to_numeric(trials[source], errors="coerce").to_numpy(float)
            if not np.isnan(values).all():
                frame[column] = values
    if "bandwidth_quantile" in frame.columns:
        frame["bandwidth_quantile"] = frame["bandwidth_quantile"].rank(pct=True)
    if "weekday" in trials.columns:
        codes = trials["weekday"].map({d: i for i, d in enumerate(WEEKDAYS)})
        if codes.notna().any():
            frame["weekday"] = codes.to_numpy(float)
    return frame


def _choose(
    frame: pd.DataFrame, recorded: list[str], trials: pd.DataFrame
) -> tuple[list[str], tuple[str, ...]]:
    """The covariates to fit, and a line for each one recorded but left out."""
    chosen, left_out = [], []
    for name in recorded:
        column = frame[name]
        coverage = float(column.notna().mean()) if len(column) else 0.0
        why = None
        if coverage < MIN_COVERAGE:
            what = "used the network" if name == "bandwidth_quantile" else "recorded it"
            why = f"only {100 * coverage:.0f} % of the informative trials {what}"
        elif not _varies_enough(column.dropna()):
            why = "barely varies (constant, or off its usual value in a handful of trials)"
        else:
            why = _spread_too_small(name, column.dropna(), trials)
        if why is None:
            chosen.append(name)
        elif column.notna().any():
            left_out.append(f"{name}: {why}")
    return chosen, tuple(left_out)


def _spread_too_small(name: str, column: pd.Series, trials: pd.DataFrame) -> str | None:
    if name == "bandwidth_quantile":
        rates = pd.to_numeric(trials["net_throughput_bps"], errors="coerce").dropna()
        p10, p90 = (float(rates.quantile(q)) for q in (0.1, 0.9))
        if p10 > 0 and p90 / p10 >= MIN_BANDWIDTH_RATIO:
            return None
        return f"barely varies (p10–p90 {p10 / 2**20:.2f}–{p90 / 2**20:.2f} MiB/s)"
    if name not in MIN_SPREAD:
        return None
    p10, p90 = (float(column.quantile(q)) for q in (0.1, 0.9))
    if p90 - p10 >= MIN_SPREAD[name]:
        return None
    return f"barely varies (p10–p90 {p10:.3g}–{p90:.3g}, under {MIN_SPREAD[name]:g})"


def _varies_enough(column: pd.Series) -> bool:
    if column.nunique() < 2:
        return False
    return int((column != column.mode().iloc[0]).sum()) >= MIN_VARIED_ROWS


def _informative(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Drop tasks and configurations whose outcome never varies, until none is left (dropping
    tasks can make a configuration constant). Returns the rows kept and the tasks dropped."""
    tasks = frame["task"].nunique()
    for _ in range(10):
        before = len(frame)
        for column in ("task", "config"):
            spread = frame.groupby(column)["y"].transform("std").fillna(0.0)
            frame = frame[spread.to_numpy() > 0]
        if len(frame) == before:
            break
    return frame, int(tasks - frame["task"].nunique())


def _subsample(frame: pd.DataFrame, n_cov: int, max_cells: int, seed: int) -> pd.DataFrame:
    """Seeded, stratified by task: at most ROWS_PER_TASK rows of each task, then whole tasks
    dropped at random until rows × design columns fits `max_cells`. Keeping rows within tasks
    (rather than thinning evenly) keeps each task's fixed effect estimable."""
    n_configs = frame["config"].nunique()

    def cells(f: pd.DataFrame) -> int:
        return len(f) * (1 + n_cov + f["task"].nunique() + n_configs)

    if cells(frame) <= max_cells:
        return frame
    # Rows are drawn by a seeded hash of their identity, not their position: the same trials are
    # kept whatever the order of the table (only exact duplicate trials tie).
    keys = frame[["task", "config", "repeat"]].assign(_seed=seed)
    frame = frame.assign(_draw=pd.util.hash_pandas_object(keys, index=False).to_numpy())
    rank = frame.groupby("task", sort=True)["_draw"].rank(method="first")
    frame = frame[rank.to_numpy() <= ROWS_PER_TASK].drop(columns="_draw")
    tasks = np.sort(frame["task"].unique())
    keep = len(tasks)
    while keep > 2 and cells(frame) * keep * keep > max_cells * len(tasks) ** 2:
        keep -= 1  # rows and columns both shrink about linearly with the tasks kept
    chosen = np.random.default_rng(seed).choice(tasks, size=keep, replace=False)
    return frame[frame["task"].isin(chosen)]


def _fit(
    frame: pd.DataFrame, covariates: list[str], level: float
) -> tuple[tuple[Coefficient, ...], list[str], list[str]]:
    """The coefficients, the covariates left out as collinear with the fixed effects, and what
    statsmodels warned of, in words (a warning is never printed as it came)."""
    numeric = [c for c in covariates if c not in CATEGORICAL]
    effects = [_weekday_dummies(frame[c]) for c in covariates if c in CATEGORICAL]
    dummies = [
        pd.get_dummies(frame[c], prefix=c, drop_first=True, dtype=float) for c in ("task", "config")
    ]
    fixed = add_constant(pd.concat(dummies, axis=1), has_constant="add").to_numpy()
    candidates = pd.concat([frame[numeric], *effects], axis=1)
    collinear = _collinear_with(fixed, candidates)
    candidates = candidates.drop(columns=collinear)
    names = list(candidates.columns)
    if not names:
        return (), collinear, []
    design = np.column_stack([fixed[:, :1], candidates.to_numpy(float), fixed[:, 1:]])
    groups = pd.factorize(frame["task"])[0]
    # One BLAS thread: IRLS solves many small least-squares problems, where OpenBLAS threads only
    # spin; on a loaded 2-core host they made each solve ~30x slower (measured, 3000 x 63).
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(1, user_api="blas"):
        warnings.simplefilter("always")
        warnings.simplefilter("error", PerfectSeparationWarning)
        warnings.simplefilter("error", ConvergenceWarning)
        # statsmodels' own modules, not statsmodels.api, which imports its plots and time series
        model = GLM(frame["y"].to_numpy(), design, family=Binomial())
        result = model.fit(cov_type="cluster", cov_kwds={"groups": groups})
    z = z_value(level)
    out = []
    for i, name in enumerate(names, start=1):
        coef, se = float(result.params[i]), float(result.bse[i])
        across = coef * _span(candidates[name])
        if not (math.isfinite(coef) and math.isfinite(se)) or abs(across) > MAX_ABS_LOG_ODDS:
            raise ValueError(
                f"{name}: log-odds {coef:.3g} per unit, {across:.3g} across its range "
                "(quasi-separation)"
            )
        ci = (coef - z * se, coef + z * se)
        out.append(Coefficient(name, coef, se, ci, float(result.pvalues[i]), math.exp(coef)))
    return tuple(out), collinear, _in_words(caught)


def _span(column: pd.Series) -> float:
    """The p10–p90 range, or the whole range for a column mostly at one value (a weekday
    dummy): what the covariate moved by in the data."""
    low, high = float(column.quantile(0.1)), float(column.quantile(0.9))
    return high - low if high > low else float(column.max() - column.min())


COLLINEAR = (
    "collinear with the task and configuration effects (it does not vary within them, as when "
    "each configuration ran on one day or one provider), so its effect cannot be told apart"
)


def _collinear_with(fixed: np.ndarray, candidates: pd.DataFrame) -> list[str]:
    """Candidates that add nothing to the span of `fixed` and of the candidates before them:
    their coefficient is not identified, and a fit with them has a singular matrix (statsmodels'
    SingularMatrixWarning). Gram-Schmidt against an orthonormal basis of the fixed effects."""
    u, s, _ = np.linalg.svd(fixed, full_matrices=False)
    basis = u[:, s > s[0] * 1e-10] if s.size else u[:, :0]
    out = []
    for name in candidates.columns:
        column = candidates[name].to_numpy(float)
        column = column - column.mean()
        residual = column - basis @ (basis.T @ column)
        size = float(np.linalg.norm(residual))
        if size <= 1e-8 * max(1.0, float(np.linalg.norm(column))):
            out.append(str(name))
        else:
            basis = np.column_stack([basis, residual / size])
    return out


def _in_words(caught: list[warnings.WarningMessage]) -> list[str]:
    """statsmodels' warnings as sentences of the report, one per kind."""
    out = []
    for kind in dict.fromkeys(w.category for w in caught):
        message = next(str(w.message) for w in caught if w.category is kind).splitlines()[0]
        if "singular" in kind.__name__.lower() or "singular" in message.lower():
            out.append(
                "statsmodels found the fit's matrix singular: the SEs above rest on a "
                "pseudo-inverse and may be too small."
            )
        else:
            out.append(f"statsmodels warned ({kind.__name__}): {message}.")
    return out


def _weekday_dummies(codes: pd.Series) -> pd.DataFrame:
    """One column per weekday seen, the first seen being the reference: `weekday[Tue]`."""
    labels = pd.Categorical([WEEKDAYS[int(c)] for c in codes], categories=list(WEEKDAYS))
    dummies = pd.get_dummies(labels, dtype=float).loc[:, lambda d: d.sum() > 0]
    dummies.index = codes.index
    dummies.columns = [f"weekday[{c}]" for c in dummies.columns]
    return dummies.iloc[:, 1:]
