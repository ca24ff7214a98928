"""Paired comparison against independent references: a brute-force sign-flip enumeration written
out here, scipy's binomtest and permutation_test, statsmodels' multipletests and OLS; plus the
exact additivity of the noise/capability decomposition."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.multitest import multipletests

from levelfield.analysis.decomposition import decompose, split
from levelfield.analysis.paired import (
    compare,
    holm,
    mcnemar_pvalue,
    paired_difference,
)
from levelfield.analysis.signflip import sign_flip_pvalue


def brute_force_sign_flip(d: list[float]) -> float:
    observed = abs(sum(d))
    hits = total = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        total += 1
        if abs(sum(s * x for s, x in zip(signs, d, strict=True))) >= observed - 1e-12:
            hits += 1
    return hits / total


def _table(rows: list[tuple[str, str, str, int, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["task", "agent", "policy", "repeat", "status"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_sign_flip_matches_brute_force(seed: int) -> None:
    d = np.random.default_rng(seed).normal(0.1, 0.3, 9).round(2)
    p, method = sign_flip_pvalue(d)
    assert method == "sign-flip exact"
    assert p == pytest.approx(brute_force_sign_flip(list(d)))


def test_sign_flip_on_binary_differences_is_exact_mcnemar() -> None:
    d = np.array([1, 1, 1, 1, 1, -1, 0, 0, 1, 0, 1, -1])  # 7 for a, 2 for b, 3 ties
    p_flip, _ = sign_flip_pvalue(d)
    assert p_flip == pytest.approx(stats.binomtest(7, 9, 0.5).pvalue)
    assert mcnemar_pvalue(7, 2) == pytest.approx(stats.binomtest(7, 9, 0.5).pvalue)
    assert mcnemar_pvalue(0, 0) == 1.0


def test_compare_uses_mcnemar_for_one_trial_per_side() -> None:
    # a passes where b fails on t0-t5; b passes where a fails on t6; both pass on t7.
    rows = []
    for i in range(8):
        rows.append((f"t{i}", "x", "headroom", 0, "passed" if i != 6 else "failed"))
        rows.append((f"t{i}", "x", "strict", 0, "passed" if i >= 6 else "infra_error"))
    result = compare(_table(rows), by="policy")
    (pair,) = result.pairs
    assert (pair.a, pair.b) == ("headroom", "strict")
    assert pair.method == "McNemar exact"
    assert pair.p_value == pytest.approx(stats.binomtest(6, 7, 0.5).pvalue)
    assert pair.estimate.diff == pytest.approx(5 / 8)


def test_holm_matches_statsmodels() -> None:
    p = np.random.default_rng(4).random(12) ** 3
    np.testing.assert_allclose(holm(p), multipletests(p, method="holm")[1], rtol=1e-12)
    with_nan = holm([0.01, math.nan, 0.04])
    np.testing.assert_allclose(with_nan[[0, 2]], multipletests([0.01, 0.04], method="holm")[1])
    assert math.isnan(with_nan[1])


def test_paired_difference_matches_ols_on_differences_and_pearson() -> None:
    rng = np.random.default_rng(5)
    a = rng.random(30)
    b = 0.6 * a + 0.4 * rng.random(30)
    est = paired_difference(a, b)
    fit = sm.OLS(a - b, np.ones(30)).fit()
    assert est.diff == pytest.approx(fit.params[0])
    assert est.se == pytest.approx(fit.bse[0])
    assert est.correlation == pytest.approx(stats.pearsonr(a, b).statistic)
    assert est.ci == pytest.approx((est.diff - 1.959964 * est.se, est.diff + 1.959964 * est.se))


def test_unpaired_tasks_are_listed_not_dropped() -> None:
    rows = [(f"t{i}", "x", "strict", r, "passed") for i in range(4) for r in range(2)]
    rows += [(f"t{i}", "x", "uncapped", r, "failed") for i in range(1, 6) for r in range(2)]
    (pair,) = compare(_table(rows), by="policy").pairs
    assert pair.only_a == ("t4", "t5") and pair.only_b == ("t0",)
    assert pair.estimate.n_tasks == 3
    assert pair.method == "sign-flip exact"


def test_compare_by_agent_holds_the_policy_fixed() -> None:
    rows = [
        (f"t{i}", ag, pol, 0, "passed" if (i + len(ag)) % 2 else "failed")
        for i in range(6)
        for ag in ("aa", "bbb")
        for pol in ("strict", "headroom")
    ]
    result = compare(_table(rows), by="agent")
    assert [dict(p.within)["policy"] for p in result.pairs] == ["headroom", "strict"]
    expected = multipletests([p.p_value for p in result.pairs], method="holm")[1]
    np.testing.assert_allclose([p.p_holm for p in result.pairs], expected)


def test_compare_rejects_unknown_dimension_and_metric() -> None:
    table = _table([("t", "x", "strict", 0, "passed")])
    with pytest.raises(ValueError, match="cannot compare"):
        compare(table, by="task")
    with pytest.raises(ValueError, match="metric"):
        compare(table, metric="reward")


def test_decomposition_is_exactly_additive_worked_example() -> None:
    # before: e = 0.2, c = 0.5 -> score 0.4; after: e = 0.05, c = 0.6 -> score 0.57.
    # noise = 0.15 * (0.5 + 0.6) / 2 = 0.0825; unlock = 0.1 * (0.8 + 0.95) / 2 = 0.0875.
    noise, unlock = split(np.array(0.4), np.array(0.2), np.array(0.57), np.array(0.05))
    assert float(noise) == pytest.approx(0.0825)
    assert float(unlock) == pytest.approx(0.0875)
    assert float(noise + unlock) == pytest.approx(0.17)


def test_decompose_parts_sum_to_delta_and_cis_bracket_estimates() -> None:
    rng = np.random.default_rng(6)
    e1, e2 = rng.random(50) * 0.4, rng.random(50) * 0.1
    s1, s2 = (1 - e1) * rng.random(50), (1 - e2) * rng.random(50)
    d = decompose(np.column_stack([s1, e1, s2, e2]), n_resamples=500, seed=1)
    assert d.noise_removal + d.capability_unlock == pytest.approx(d.delta_score)
    assert d.delta_score == pytest.approx(s2.mean() - s1.mean())
    for value, ci in [
        (d.noise_removal, d.noise_removal_ci),
        (d.capability_unlock, d.capability_unlock_ci),
    ]:
        assert ci[0] <= value <= ci[1]


def test_two_runs_in_different_windows_compare_as_wholes() -> None:
    from levelfield.analysis.simulate import simulate_trials

    runs = [
        simulate_trials(n_tasks=10, agents=("x",), policies={"p": 3.0}, repeats=2, seed=seed)
        .assign(run=run, window=window)
        for seed, run, window in ((1, "A", "morning"), (2, "B", "evening"))
    ]
    (pair,) = compare(pd.concat(runs, ignore_index=True), by="run").pairs
    assert (pair.a, pair.b, pair.estimate.n_tasks) == ("A", "B", 10)
