"""Leaderboards with known true scores → how often the rank sets cover the true ranks.

An entry's true score is its expected pass rate over the population of tasks, the thing a
leaderboard claims to rank. Each simulated leaderboard draws its own tasks and trials: a task
has a difficulty b_t ~ N(0, task_sd²) on the logit scale, an entry meets it with its own
task × entry deviation e_jt ~ N(0, interaction_sd²), and passes each of K trials with
probability expit(μ_j + b_t + e_jt). μ_j is solved so that E[expit(μ_j + b + e)] is the entry's
true score (Gauss–Hermite over b + e ~ N(0, task_sd² + interaction_sd²)).

TB2 defaults: task_sd 2.5 and interaction_sd 1.3 reproduce Terminal-Bench 2.0's measured
variances on the shared leaderboard (variance of one entry's per-task scores 0.14, of adjacent
entries' per-task differences 0.11, with K = 5 on 89 tasks).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from levelfield.analysis.estimators import FloatArray, IntArray
from levelfield.analysis.ranks import rank_sets

TB2_TASK_SD = 2.5
TB2_INTERACTION_SD = 1.3
_HERMITE_POINTS = 60


@dataclass(frozen=True, slots=True)
class Design:
    """A leaderboard to simulate: true scores (population pass rates) of its entries."""

    name: str
    true_scores: tuple[float, ...]
    n_tasks: int = 89
    repeats: int = 5
    task_sd: float = TB2_TASK_SD
    interaction_sd: float = TB2_INTERACTION_SD


@dataclass(frozen=True, slots=True)
class Coverage:
    """Shares of simulated leaderboards whose sets covered the truth, with their Monte Carlo
    SE: `simultaneous` (every entry's rank at once), `marginal` (each entry's own set, averaged
    over entries; `marginal_worst` the entry covered least often), `first` (every true #1 in the
    could-be-#1 set). Widths are mean set sizes (upper − lower + 1); `tiers` the mean count."""

    design: str
    n_entries: int
    n_sims: int
    level: float
    simultaneous: float
    marginal: float
    marginal_worst: float
    first: float
    simultaneous_width: float
    marginal_width: float
    first_size: float
    tiers: float

    @property
    def mc_se(self) -> float:
        """Monte Carlo SE of a coverage share near the nominal level."""
        return math.sqrt(self.level * (1 - self.level) / self.n_sims)


def true_ranks(scores: Sequence[float]) -> IntArray:
    """1 + the number of strictly higher scores: tied entries share the best rank."""
    values = np.asarray(scores, float)
    return 1 + (values[None, :] > values[:, None]).sum(axis=1)


def logit_offsets(design: Design) -> FloatArray:
    """μ_j such that the population pass rate of entry j is its true score."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(_HERMITE_POINTS)
    weights = weights / weights.sum()
    spread = math.hypot(design.task_sd, design.interaction_sd)

    def rate(mu: float) -> float:
        return float(weights @ special.expit(mu + spread * nodes))

    return np.array(
        [optimize.brentq(lambda m, s=s: rate(m) - s, -40.0, 40.0) for s in design.true_scores]
    )


def simulate_leaderboard(
    design: Design, offsets: FloatArray, rng: np.random.Generator
) -> FloatArray:
    """One leaderboard: per-task scores (tasks × entries), passes / K."""
    p = offsets.size
    difficulty = rng.normal(0.0, design.task_sd, design.n_tasks)[:, None]
    deviation = rng.normal(0.0, design.interaction_sd, (design.n_tasks, p))
    chance = special.expit(offsets[None, :] + difficulty + deviation)
    return rng.binomial(design.repeats, chance) / design.repeats


def rank_coverage(
    design: Design,
    *,
    n_sims: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> Coverage:
    """Simulate `n_sims` leaderboards of `design` and count how often each set held the truth."""
    offsets = logit_offsets(design)
    truth = true_ranks(design.true_scores)
    labels = [f"entry-{j}" for j in range(offsets.size)]
    rng = np.random.default_rng(seed)
    simultaneous, first, tiers = [], [], []
    marginal = np.zeros(offsets.size)
    widths = np.zeros(3)
    for _ in range(n_sims):
        sets = rank_sets(simulate_leaderboard(design, offsets, rng), labels, level=level)
        sim = np.array(sets.simultaneous)
        marg = np.array(sets.marginal)
        simultaneous.append(bool(np.all((sim[:, 0] <= truth) & (truth <= sim[:, 1]))))
        marginal += (marg[:, 0] <= truth) & (truth <= marg[:, 1])
        best = {labels[j] for j in np.flatnonzero(truth == 1)}
        first.append(best <= set(sets.could_be_first))
        tiers.append(max(sets.tier))
        widths += (
            float(np.mean(sim[:, 1] - sim[:, 0] + 1)),
            float(np.mean(marg[:, 1] - marg[:, 0] + 1)),
            len(sets.could_be_first),
        )
    marginal /= n_sims
    return Coverage(
        design=design.name,
        n_entries=offsets.size,
        n_sims=n_sims,
        level=level,
        simultaneous=float(np.mean(simultaneous)),
        marginal=float(marginal.mean()),
        marginal_worst=float(marginal.min()),
        first=float(np.mean(first)),
        simultaneous_width=float(widths[0] / n_sims),
        marginal_width=float(widths[1] / n_sims),
        first_size=float(widths[2] / n_sims),
        tiers=float(np.mean(tiers)),
    )
