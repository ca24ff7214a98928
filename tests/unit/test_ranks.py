"""Rank confidence sets against independent references: the studentised range (Tukey) for the
simultaneous critical value of independent equal-variance entries, a numerical integral for an
entry's marginal one, worked examples with known ranks, and coverage on simulated leaderboards
whose true scores are known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, linalg, optimize, special, stats

from levelfield.analysis.ranks import rank_sets
from levelfield.analysis.simulate_ranks import Design, rank_coverage, true_ranks


def independent_entries(means: list[float], spread: float = 0.3) -> np.ndarray:
    """64 tasks on which the entries' deviations are orthogonal with equal norms (columns of a
    Hadamard matrix): the task-clustered covariance of their scores is exactly σ²·I."""
    h = linalg.hadamard(64)[:, 1 : len(means) + 1]
    return np.asarray(means)[None, :] + spread * h


def test_first_simultaneous_critical_value_is_the_studentised_range() -> None:
    # max over ordered pairs of (Z_j − Z_k) / (σ√2) is the range of p iid normals over √2.
    p = 8
    sets = rank_sets(independent_entries([0.5] * p), [f"e{j}" for j in range(p)], n_draws=40_000)
    gaussian = stats.studentized_range.ppf(0.95, p, np.inf) / math.sqrt(2)
    expected = stats.t.ppf(stats.norm.cdf(gaussian), 63)  # carried to t on 64 tasks' SEs
    assert sets.critical_values[0] == pytest.approx(expected, abs=0.03)


def test_marginal_critical_value_matches_its_integral() -> None:
    # Entry j alone: P(max_k |Z_j − Z_k| <= c·σ√2) = ∫ φ(z) [Φ(z + c√2) − Φ(z − c√2)]^(p−1) dz.
    p = 8

    def coverage(c: float) -> float:
        def inner(z: float) -> float:
            band = special.ndtr(z + c * math.sqrt(2)) - special.ndtr(z - c * math.sqrt(2))
            return float(math.exp(-z * z / 2) / math.sqrt(2 * math.pi) * band ** (p - 1))

        return integrate.quad(inner, -10, 10)[0]

    expected = stats.t.ppf(stats.norm.cdf(optimize.brentq(lambda c: coverage(c) - 0.95, 1, 6)), 63)
    sets = rank_sets(independent_entries([0.5] * p), [f"e{j}" for j in range(p)], n_draws=40_000)
    assert np.allclose(sets.marginal_critical_values, expected, atol=0.04)


def test_two_separated_groups_worked_example() -> None:
    # Within a group the entries tie; between groups the gap is 80 points on 64 tasks.
    per_task = independent_entries([0.9, 0.9, 0.1, 0.1], spread=0.05)
    sets = rank_sets(per_task, ["a", "b", "c", "d"])
    assert sets.rank == (1, 1, 3, 3)
    assert sets.simultaneous == ((1, 2), (1, 2), (3, 4), (3, 4))
    assert sets.marginal == sets.simultaneous
    assert sets.tier == (1, 1, 2, 2)
    assert sets.could_be_first == ("a", "b")
    assert set(sets.proven_better) == {("a", "c"), ("a", "d"), ("b", "c"), ("b", "d")}


def test_a_noisy_entry_stays_in_the_top_tier_below_a_proven_one() -> None:
    # "c" scores below "b" but ran 4 of the 64 tasks: nobody can be proven better than it.
    per_task = independent_entries([0.9, 0.55, 0.5], spread=0.05)
    per_task[4:, 2] = np.nan
    per_task[:4, 2] = np.arange(4) % 2
    sets = rank_sets(per_task, ["a", "b", "c"])
    assert sets.tier[:2] == (1, 2)
    assert sets.tier[2] == 1
    assert sets.simultaneous[2][0] == 1


def test_true_ranks_share_the_best_rank_on_ties() -> None:
    assert true_ranks([0.5, 0.7, 0.7, 0.1]).tolist() == [3, 1, 1, 4]


@pytest.mark.parametrize(
    "design",
    [
        Design("8 tied, K = 5", (0.6,) * 8),
        Design("ties and gaps", (0.8, 0.8, 0.77, 0.7, 0.7, 0.7, 0.55, 0.3)),
        Design("8 tied, K = 1", (0.5,) * 8, repeats=1),
    ],
    ids=lambda d: d.name,
)
def test_rank_sets_cover_the_true_ranks(design: Design) -> None:
    result = rank_coverage(design, n_sims=100, n_draws=800, seed=3)
    floor = 0.95 - 3 * result.mc_se
    assert result.simultaneous >= floor
    assert result.marginal_worst >= floor
    assert result.first >= floor
