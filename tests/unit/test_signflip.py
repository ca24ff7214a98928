"""The sign-flip p-value against independent references: brute-force enumeration of every sign
pattern, scipy's exact Wilcoxon signed-rank distribution (a sign-flip of the ranks), scipy's
binomial test (a sign-flip of equal magnitudes), scipy's permutation_test, and the resolution it
keeps under Holm over a leaderboard's 1,485 pairs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from levelfield.analysis.paired import holm
from levelfield.analysis.signflip import EXACT, NORMAL, lattice_units, sign_flip_pvalue


def brute_force(d: np.ndarray) -> float:
    observed = abs(float(d.sum()))
    totals = [abs(float(np.dot(signs, d))) for signs in itertools.product((1, -1), repeat=d.size)]
    return float(np.mean(np.array(totals) >= observed - 1e-12))


@pytest.mark.parametrize(("seed", "denominator"), [(0, 5), (1, 5), (2, 60), (3, 12)])
def test_lattice_pvalue_equals_brute_force(seed: int, denominator: int) -> None:
    rng = np.random.default_rng(seed)
    d = rng.integers(-denominator, denominator + 1, 13) / denominator
    p, method = sign_flip_pvalue(d)
    assert method == EXACT
    assert p == pytest.approx(brute_force(d), rel=1e-12)


def test_off_lattice_few_tasks_are_enumerated() -> None:
    d = np.random.default_rng(4).normal(0.1, 0.3, 11)
    assert lattice_units(d) is None
    p, method = sign_flip_pvalue(d)
    assert method == EXACT
    assert p == pytest.approx(brute_force(d))


@pytest.mark.parametrize("seed", [5, 6])
def test_signed_ranks_give_scipys_exact_wilcoxon(seed: int) -> None:
    # The Wilcoxon signed-rank statistic is the sign-flip sum of the ranks: same null, same p.
    n = 45
    signs = np.where(np.random.default_rng(seed).random(n) < 0.75, 1, -1)
    d = np.arange(1, n + 1) * signs
    p, method = sign_flip_pvalue(d)
    assert method == EXACT
    assert p == pytest.approx(stats.wilcoxon(d, method="exact").pvalue, rel=1e-9)


def test_equal_magnitudes_give_the_exact_sign_test_at_89_tasks() -> None:
    d = np.array([0.2] * 72 + [-0.2] * 17 + [0.0] * 3)
    p, _ = sign_flip_pvalue(d)
    reference = stats.binomtest(72, 89, 0.5).pvalue
    assert reference < 1e-8
    assert p == pytest.approx(reference, rel=1e-9)


def test_agrees_with_scipy_permutation_test_enumerated() -> None:
    d = np.random.default_rng(7).integers(-5, 6, 12) / 5
    ref = stats.permutation_test(
        (d,), np.sum, permutation_type="samples", n_resamples=np.inf, alternative="two-sided"
    ).pvalue
    assert sign_flip_pvalue(d)[0] == pytest.approx(ref, rel=1e-9)


def test_normal_approximation_off_lattice_with_many_tasks() -> None:
    d = np.random.default_rng(8).normal(0.06, 0.3, 60)
    p, method = sign_flip_pvalue(d)
    assert method == NORMAL
    ref = stats.permutation_test(
        (d,), np.sum, permutation_type="samples", n_resamples=20_000, random_state=9
    ).pvalue
    assert p == pytest.approx(ref, abs=0.01)


def test_a_clear_gap_stays_distinguishable_under_holm_over_1485_pairs() -> None:
    # 89 tasks, K = 5: one pair 40 points apart among 1,484 pairs of pure noise.
    rng = np.random.default_rng(10)
    noise = (rng.binomial(5, 0.5, (1484, 89)) - rng.binomial(5, 0.5, (1484, 89))) / 5
    gap = (rng.binomial(5, 0.8, 89) - rng.binomial(5, 0.4, 89)) / 5
    p = [sign_flip_pvalue(d)[0] for d in [gap, *noise]]
    assert p[0] < 1e-12
    assert holm(p)[0] < 0.001


def test_extremes_and_degenerate_input() -> None:
    assert sign_flip_pvalue(np.full(89, 0.2))[0] == pytest.approx(2.0**-88, rel=1e-9)
    assert sign_flip_pvalue(np.zeros(5)) == (1.0, EXACT)
    p, method = sign_flip_pvalue(np.array([np.nan]))
    assert np.isnan(p) and method == "none"
