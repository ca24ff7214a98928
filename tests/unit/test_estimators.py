"""Estimators against independent references: statsmodels (clustered OLS/WLS, Wilson), a plain
bootstrap loop, a hand-worked example, and a simulation with known variance components."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm
from statsmodels.stats.proportion import proportion_confint

from levelfield.analysis.estimators import (
    bootstrap_ci,
    bootstrap_means,
    clustered_mean,
    mean_of_tasks,
    task_means,
    variance_components,
    wilson_interval,
)


def _trials(n_tasks: int, repeats: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.beta(2, 3, n_tasks)
    task = np.repeat(np.arange(n_tasks), repeats)
    return (rng.random(task.size) < p[task]).astype(float), task


def test_worked_example_by_hand() -> None:
    # Tasks: [pass, pass], [pass, fail], [fail, fail] -> per-task means 1, 0.5, 0.
    # mean 0.5; sd of (1, .5, 0) with ddof 1 = 0.5; SE = 0.5 / sqrt(3) = 0.288675...
    # Within-task variances (ddof 1): 0, 0.5, 0 -> E[s^2] = 1/6, E[s^2]/K = 1/12;
    # Var_task = 0.25 - 1/12 = 1/6.  Miller: (1/6 + (1/6)/2) / 3 = 0.25 / 3 = SE^2.
    y = np.array([1, 1, 1, 0, 0, 0], float)
    task = np.array([0, 0, 1, 1, 2, 2])
    est = clustered_mean(y, task)
    assert est.mean == pytest.approx(0.5)
    assert est.se == pytest.approx(0.5 / math.sqrt(3))
    assert est.ci == pytest.approx((0.5 - 1.959964 * 0.288675, 0.5 + 1.959964 * 0.288675), abs=1e-5)
    assert (est.n_tasks, est.n_trials) == (3, 6)
    parts = variance_components(y, task)
    assert parts.mean_within_var == pytest.approx(1 / 6)
    assert parts.mean_within_var_over_k == pytest.approx(1 / 12)
    assert parts.var_task == pytest.approx(1 / 6)
    assert math.sqrt((parts.var_task + parts.mean_within_var / 2) / 3) == pytest.approx(est.se)


def test_clustered_se_matches_statsmodels_ols_cluster_equal_k() -> None:
    """With a constant only, statsmodels' CRV1 correction G/(G-1)·(N-1)/(N-K) is G/(G-1)
    (K = 1 regressor), and with equal cluster sizes CRV1 equals sd(task means)/sqrt(G) exactly:
    the corrected form is the one to compare with."""
    y, task = _trials(40, np.full(40, 5), seed=1)
    ours = clustered_mean(y, task)
    fit = sm.OLS(y, np.ones_like(y)).fit(cov_type="cluster", cov_kwds={"groups": task})
    assert ours.mean == pytest.approx(fit.params[0])
    assert ours.se == pytest.approx(fit.bse[0], rel=1e-10)


def test_clustered_se_matches_statsmodels_wls_cluster_unequal_k() -> None:
    """Averaging tasks first is WLS with weights 1/K_task; its cluster-robust SE (same CRV1
    correction) is ours for any cluster sizes."""
    repeats = np.random.default_rng(2).integers(1, 7, 30)
    y, task = _trials(30, repeats, seed=3)
    ours = clustered_mean(y, task)
    weights = 1.0 / repeats[task]
    fit = sm.WLS(y, np.ones_like(y), weights=weights).fit(
        cov_type="cluster", cov_kwds={"groups": task}
    )
    assert ours.mean == pytest.approx(fit.params[0])
    assert ours.se == pytest.approx(fit.bse[0], rel=1e-10)


def test_bernoulli_within_variance_formula() -> None:
    """For binary outcomes the unbiased within-task variance is K/(K-1)·p(1-p)."""
    y, task = _trials(25, np.full(25, 4), seed=4)
    means, _ = task_means(y, task)
    expected = np.mean(4 / 3 * means * (1 - means))
    assert variance_components(y, task).mean_within_var == pytest.approx(expected)


def test_miller_components_recover_known_population_values() -> None:
    """mu ~ Beta(2, 3): Var(mu) = 0.04, E[mu(1 - mu)] = 0.2; the split estimates both, and the
    analytic SE estimates Miller's (Var_task + E[sigma^2]/K)/n."""
    n, k = 4000, 4
    y, task = _trials(n, np.full(n, k), seed=5)
    parts = variance_components(y, task)
    assert parts.var_task == pytest.approx(0.04, abs=0.006)
    assert parts.mean_within_var == pytest.approx(0.2, abs=0.006)
    miller_se = math.sqrt((0.04 + 0.2 / k) / n)
    assert clustered_mean(y, task).se == pytest.approx(miller_se, rel=0.05)


def test_wilson_matches_statsmodels() -> None:
    for successes, n in [(0, 10), (3, 10), (10, 10), (57, 200), (1, 1)]:
        for level in (0.9, 0.95):
            ref = proportion_confint(successes, n, alpha=1 - level, method="wilson")
            assert wilson_interval(successes, n, level) == pytest.approx(ref, abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_bootstrap_matches_a_plain_loop_with_the_same_stream() -> None:
    per_task = np.random.default_rng(6).random(23)
    ours = bootstrap_means(per_task, n_resamples=300, seed=9)
    rng = np.random.default_rng(9)
    draws = rng.integers(0, per_task.size, size=(300, per_task.size))
    plain = np.array([per_task[row].mean() for row in draws])
    np.testing.assert_allclose(ours, plain, rtol=1e-12)


def test_bootstrap_is_seeded_and_close_to_the_analytic_interval() -> None:
    per_task = np.random.default_rng(7).beta(2, 2, 400)
    first = bootstrap_ci(per_task, n_resamples=2000, seed=1)
    assert first == bootstrap_ci(per_task, n_resamples=2000, seed=1)
    analytic = mean_of_tasks(per_task).ci
    assert first == pytest.approx(analytic, abs=0.005)


def test_bootstrap_leaves_out_undefined_tasks_per_resample() -> None:
    values = np.array([[1.0, np.nan], [0.0, 0.5], [1.0, 1.0]])
    boot = bootstrap_means(values, n_resamples=50, seed=0)
    assert boot.shape == (50, 2)
    assert np.all((boot[:, 1] >= 0.5) | np.isnan(boot[:, 1]))


def test_undefined_is_nan_not_zero() -> None:
    one = clustered_mean(np.array([1.0, 0.0]), np.array([0, 0]))
    assert one.mean == 0.5 and math.isnan(one.se) and one.n_tasks == 1
    empty = mean_of_tasks(np.array([np.nan]))
    assert math.isnan(empty.mean) and empty.n_tasks == 0
    assert all(math.isnan(v) for v in bootstrap_ci(np.array([]), n_resamples=10))


def test_components_with_one_repeat_keep_the_total_only() -> None:
    y, task = _trials(30, np.ones(30, int), seed=8)
    parts = variance_components(y, task)
    assert math.isnan(parts.var_task) and math.isnan(parts.mean_within_var)
    assert parts.total == pytest.approx(np.var(y, ddof=1))
