"""Rank confidence sets against independent references: scipy's paired t-tests with statsmodels'
Holm for the proven pairs and both kinds of rank set, fractions for exact ties, worked examples
with known ranks, and coverage on simulated leaderboards whose true scores are known."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
from scipy import linalg, stats
from statsmodels.stats.multitest import multipletests

from levelfield.analysis.ranks import rank_sets, ranks_of
from levelfield.analysis.simulate_ranks import (
    Design,
    logit_offsets,
    rank_coverage,
    simulate_leaderboard,
    true_ranks,
)


def independent_entries(means: list[float], spread: float = 0.3) -> np.ndarray:
    """64 tasks on which the entries' deviations are orthogonal with equal norms (columns of a
    Hadamard matrix): the task-clustered covariance of their scores is exactly σ²·I."""
    h = linalg.hadamard(64)[:, 1 : len(means) + 1]
    return np.asarray(means)[None, :] + spread * h


def holm_reference(per_task: np.ndarray, level: float = 0.95) -> tuple[set, list, list]:
    """Independently: every ordered pair's one-sided paired t-test (scipy), Holm over all of
    them (statsmodels) for the simultaneous sets, and over each entry's pairs for its marginal
    set. Returns (proven better pairs, simultaneous bounds, marginal bounds)."""
    p = per_task.shape[1]
    pairs, p_values = [], []
    for j, k in itertools.permutations(range(p), 2):
        if np.std(per_task[:, j] - per_task[:, k]) == 0:
            continue  # identical per-task scores: nothing to test
        pairs.append((j, k))
        p_values.append(
            stats.ttest_rel(per_task[:, j], per_task[:, k], alternative="greater").pvalue
        )
    rejected = multipletests(p_values, alpha=1 - level, method="holm")[0]
    better = {pair for pair, r in zip(pairs, rejected, strict=True) if r}
    simultaneous = [
        (1 + sum((k, j) in better for k in range(p)), p - sum((j, k) in better for k in range(p)))
        for j in range(p)
    ]
    marginal = []
    for j in range(p):
        own = [i for i, (a, b) in enumerate(pairs) if j in (a, b)]
        hit = multipletests([p_values[i] for i in own], alpha=1 - level, method="holm")[0]
        won = {pairs[i] for i, r in zip(own, hit, strict=True) if r}
        marginal.append(
            (1 + sum((k, j) in won for k in range(p)), p - sum((j, k) in won for k in range(p)))
        )
    return better, simultaneous, marginal


def test_rank_sets_are_holm_over_the_pairs_paired_t_tests() -> None:
    design = Design("spread", tuple(np.linspace(0.85, 0.2, 12)))
    per_task = simulate_leaderboard(design, logit_offsets(design), np.random.default_rng(5))
    labels = [f"e{j}" for j in range(per_task.shape[1])]
    sets = rank_sets(per_task, labels)
    better, simultaneous, marginal = holm_reference(per_task)
    assert {(labels[j], labels[k]) for j, k in better} == set(sets.proven_better)
    assert list(sets.simultaneous) == simultaneous
    assert list(sets.marginal) == marginal
    assert 0 < len(better) < 12 * 11  # some pairs told apart, not all
    assert sets.critical_values[0] == pytest.approx(stats.t.ppf(1 - 0.05 / 132, 88))


def test_exact_ties_share_a_rank_whatever_the_float_sums_say() -> None:
    # 1/10 + 2/10 + 7/10 in two orders: float sums differ in the last bit, fractions do not.
    a = np.array([0.1, 0.2, 0.7, 0.6])
    b = np.array([0.7, 0.2, 0.1, 0.6])
    assert a.sum() != b.sum()
    per_task = np.column_stack([b, a, a * 0.5])
    exact = [sum(map(Fraction, ("1/10", "2/10", "7/10", "6/10"))) / 4] * 2 + [Fraction(1, 5)]
    sets = rank_sets(per_task, ["b", "a", "c"], exact=exact)
    assert sets.scores[0] != sets.scores[1] and sets.rank == (1, 1, 3)
    assert ranks_of([Fraction(1, 3), Fraction(2, 6), Fraction(1, 2)]) == [2, 2, 1]


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
    result = rank_coverage(design, n_sims=100, seed=3)
    floor = 0.95 - 3 * result.mc_se
    assert result.simultaneous >= floor
    assert result.marginal_worst >= floor
    assert result.first >= floor
