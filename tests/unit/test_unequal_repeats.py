"""Unequal repeats K_i (what an adaptive sweep produces) against independent references: exact
expectations by brute-force enumeration of every outcome, statsmodels' cluster-robust WLS, and
the closed-form Neyman allocation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from levelfield.analysis import allocation
from levelfield.analysis.calibration import calibrate
from levelfield.analysis.estimators import components_from_sums
from levelfield.analysis.paired import paired_difference
from levelfield.analysis.power import power_analysis


def _outcomes(p: list[float], k: list[int]):  # type: ignore[no-untyped-def]
    """Every assignment of pass counts to the cells, with its probability."""
    ranges = [range(ki + 1) for ki in k]
    for passes in itertools.product(*ranges):
        prob = math.prod(
            math.comb(ki, s) * pi**s * (1 - pi) ** (ki - s)
            for pi, ki, s in zip(p, k, passes, strict=True)
        )
        yield np.array(passes, float), prob


def test_variance_components_are_unbiased_with_unequal_repeats_by_enumeration() -> None:
    p, k = [0.2, 0.5, 0.9, 0.7], [2, 3, 5, 4]
    expect = {"var_task": 0.0, "within_over_k": 0.0, "total": 0.0}
    for passes, prob in _outcomes(p, k):
        parts = components_from_sums(passes, passes, np.array(k, float))
        expect["var_task"] += prob * parts.var_task
        expect["within_over_k"] += prob * parts.mean_within_var_over_k
        expect["total"] += prob * parts.total
    pa, ka = np.array(p), np.array(k, float)
    assert expect["var_task"] == pytest.approx(np.var(pa, ddof=1), abs=1e-12)
    assert expect["within_over_k"] == pytest.approx(np.mean(pa * (1 - pa) / ka), abs=1e-12)
    assert expect["total"] == pytest.approx(np.var(pa, ddof=1) + np.mean(pa * (1 - pa) / ka))


def test_paired_variance_with_unequal_repeats_by_enumeration() -> None:
    """E[n·SE²] of the paired difference = Var_task(true d) + mean(σ²_a/K_a + σ²_b/K_b)."""
    pa, ka = [0.3, 0.8, 0.5], [2, 4, 3]
    pb, kb = [0.1, 0.8, 0.6], [3, 2, 1]
    expected_se2 = 0.0
    for passes, prob in _outcomes(pa + pb, ka + kb):
        a, b = passes[:3] / np.array(ka), passes[3:] / np.array(kb)
        expected_se2 += prob * paired_difference(a, b).se ** 2
    d = np.array(pa) - np.array(pb)
    within = np.array(pa) * (1 - np.array(pa)) / ka + np.array(pb) * (1 - np.array(pb)) / kb
    assert 3 * expected_se2 == pytest.approx(np.var(d, ddof=1) + within.mean(), abs=1e-12)


def test_target_measure_matches_statsmodels_cluster_wls_with_unequal_repeats() -> None:
    """The paired difference of per-task means is WLS (weights 1/K per cell) of the outcome on a
    configuration dummy; its CRV1 SE carries the factor (N−1)/(N−2) for two regressors, which
    ours (the CRV1 of a constant-only regression) does not."""
    rng = np.random.default_rng(11)
    n = 30
    k = rng.integers(1, 8, (2, n))
    q = rng.beta(0.5, 0.5, n)
    passes = rng.binomial(k, np.vstack([q, np.clip(q - 0.05, 0, 1)]))
    estimate, half_width, _, _ = allocation.measure(k, passes, np.array([1.0, -1.0]))
    rows = [
        (c, i, float(j < passes[c, i]), 1 / k[c, i])
        for c in range(2)
        for i in range(n)
        for j in range(k[c, i])
    ]
    frame = pd.DataFrame(rows, columns=["config", "task", "y", "w"])
    x = sm.add_constant((frame["config"] == 0).astype(float).to_numpy())
    fit = sm.WLS(frame["y"].to_numpy(), x, weights=frame["w"].to_numpy()).fit(
        cov_type="cluster", cov_kwds={"groups": frame["task"].to_numpy()}
    )
    big_n = len(frame)
    assert float(estimate) == pytest.approx(fit.params[1], abs=1e-12)
    se = float(half_width) / allocation.z_value(0.95)
    assert se * math.sqrt((big_n - 1) / (big_n - 2)) == pytest.approx(fit.bse[1], rel=1e-9)


def test_unconstrained_neyman_matches_the_closed_form() -> None:
    """Minimising Σ a²/K at Σ K = T gives K ∝ a and Σ a²/K = (Σ a)²/T (Lagrange)."""
    a = np.array([[0.5, 0.1, 0.3, 0.05]])
    k = np.full(a.shape, 1e-6)
    budget = 0.01
    extra = allocation.trials_to_reach(k, a, np.array(budget))
    assert float(extra) == pytest.approx(a.sum() ** 2 / budget, rel=1e-6)


def test_integer_allocation_is_optimal_by_enumeration() -> None:
    a = np.array([[0.4, 0.1, 0.25, 0.0, 0.3]])
    k = np.array([[2, 2, 3, 2, 2]])
    extra = 9
    got = allocation.allocate(k, a, np.array(extra))
    assert got.sum() == extra and (got >= 0).all() and got[0, 3] == 0

    def variance(add: np.ndarray) -> float:
        return float((a**2 / (k + add)).sum())

    best = min(
        variance(np.array([c]))
        for c in itertools.product(range(extra + 1), repeat=5)
        if sum(c) == extra
    )
    assert variance(got) <= best * 1.02  # rounding the continuous optimum: within 2 %


def _unequal_table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(40):
        p = rng.choice([0.0, 1.0, rng.uniform(0.1, 0.9)], p=[0.35, 0.4, 0.25])
        for policy, drop in (("strict", 0.05), ("headroom", 0.0)):
            for r in range(int(rng.integers(2, 9))):
                status = "passed" if rng.random() < p * (1 - drop) else "failed"
                rows.append((f"t{t}", "oracle", policy, r + 1, status))
    return pd.DataFrame(rows, columns=["task", "agent", "policy", "repeat", "status"])


def test_power_and_calibration_use_each_tasks_own_repeats() -> None:
    trials = _unequal_table(3)
    power = power_analysis(trials, gap=0.05)
    k = trials.groupby(["policy", "task"]).size()
    assert power.measured_repeats == pytest.approx(k.mean())
    # Var_task_diff = Var(d) − mean(σ²_a/K_a) − mean(σ²_b/K_b), each σ² with its task's own K:
    rates = trials.assign(y=trials["status"] == "passed").groupby(["policy", "task"])["y"]
    m, n_k = rates.mean(), rates.size()
    within = (n_k / (n_k - 1) * m * (1 - m) / n_k).groupby("policy").mean()
    d = m["headroom"] - m["strict"]
    assert power.var_task_diff == pytest.approx(d.var(ddof=1) - within.sum(), rel=1e-9)
    (calibration,) = calibrate(trials)
    (check,) = calibration.checks
    assert check.diff == pytest.approx(d.mean())
    assert check.n_tasks == 40


def test_a_round_after_an_all_certain_pilot_is_uniform() -> None:
    """Every task 0/2 or 2/2: the pooled variance is 0, and the round still goes somewhere."""
    k = np.full((1, 4), 2)
    passes = np.array([[0, 2, 2, 0]])
    a = allocation.weights(k, passes, np.array([1.0]))
    assert np.allclose(a, a[0, 0]) and a[0, 0] > 0
    assert allocation.allocate(k, a, np.array(8)).tolist() == [[2, 2, 2, 2]]


def test_decomposition_with_unequal_repeats_adds_up_to_the_paired_change() -> None:
    """Per-task rates with each task's own K; the split is exact and its Δscore is the mean of
    per-task changes computed here by hand."""
    from levelfield.analysis import _tidy
    from levelfield.analysis.decomposition import decompose_policies

    trials = _unequal_table(5)
    trials.loc[trials.index[::7], "status"] = "infra_error"
    (part,) = decompose_policies(_tidy.rates_of(trials), ["strict", "headroom"])
    y = (trials["status"] == "passed").groupby([trials["policy"], trials["task"]]).mean()
    assert part.delta_score == pytest.approx((y["headroom"] - y["strict"]).mean())
    assert part.noise_removal + part.capability_unlock == pytest.approx(part.delta_score)
    e = (trials["status"] == "infra_error").groupby([trials["policy"], trials["task"]]).mean()
    assert part.infra_error_rate == pytest.approx((e["strict"].mean(), e["headroom"].mean()))
