"""A Terminal-Bench-like population → thousands of simulated sweeps, adaptive or uniform, at once.

For the proof that adaptive sweeps are honest (tests/unit/test_adaptive_simulation.py) and for
the claim that they are cheaper (benchmarks/adaptive_allocation.py). Each sweep draws its own
n tasks from the population, so the truth an interval must cover is the population's expected
score (or difference), the quantity the task-clustered CI is about (estimators.py).

The population follows what the Terminal-Bench 2.0 leaderboard and the resource study show:
most tasks are solved on every attempt or on none, about a quarter in between; infrastructure
errors strike the memory-heavy minority of tasks, averaging 5.8 % of trials at 1x and 2.1 % at
3x (the same tasks, hit less often). An infra error counts as a failure (the `score`), so a cell
passes with probability q = p·(1 − e). The rounds run exactly the functions the real sweep runs
(allocation.py); only the trials are drawn instead of executed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from levelfield.analysis.allocation import (
    FloatArray,
    IntArray,
    allocate,
    contrast,
    measure,
    round_size,
    target_state,
    weights,
)

MAX_ROUNDS = 40


@dataclass(frozen=True, slots=True)
class Population:
    """Tasks: pass rate 0 with `share_zero`, 1 with `share_one`, else uniform on `middle`.
    Per-task infra rates at each configuration: Beta(concentration, ·) with the given means at
    the first configuration, scaled for the others (the same tasks are fragile everywhere)."""

    n_tasks: int = 89
    share_zero: float = 0.40
    share_one: float = 0.35
    middle: tuple[float, float] = (0.05, 0.95)
    infra_rates: tuple[float, ...] = (0.058, 0.021)  # 1x and 3x in the study
    infra_concentration: float = 0.25  # Beta's first shape: small = a few fragile tasks

    def mean_pass(self) -> float:
        return self.share_one + (1 - self.share_zero - self.share_one) * sum(self.middle) / 2

    def truth(self, coef: FloatArray) -> float:
        """Expected target over the population: p and e are drawn independently."""
        scores = [self.mean_pass() * (1 - e) for e in self.infra_rates[: len(coef)]]
        return float(np.dot(coef, scores))

    def draw(self, sweeps: int, configs: int, rng: np.random.Generator) -> FloatArray:
        """Per-cell pass probabilities q, shape (sweeps, configs, n_tasks)."""
        shape = (sweeps, self.n_tasks)
        u = rng.random(shape)
        p = np.where(
            u < self.share_zero,
            0.0,
            np.where(u < self.share_zero + self.share_one, 1.0, rng.uniform(*self.middle, shape)),
        )
        first = self.infra_rates[0]
        a = self.infra_concentration
        e = rng.beta(a, a * (1 - first) / first, shape)
        scale = np.array(self.infra_rates[:configs]) / first
        return p[:, None, :] * (1 - np.clip(e[:, None, :] * scale[None, :, None], 0, 1))


@dataclass(frozen=True, slots=True)
class SweepResults:
    """One entry per simulated sweep."""

    estimate: FloatArray
    half_width: FloatArray
    trials: IntArray
    reached: np.ndarray
    drawn_truth: FloatArray  # the target over the sweep's own tasks (its true q, not sampled)
    repeats: IntArray  # final K per cell, (sweeps, configs, n)


def simulate_adaptive(
    q: FloatArray,
    coef: FloatArray,
    half_width: float,
    *,
    max_trials: int,
    pilot: int = 2,
    level: float = 0.95,
    rng: np.random.Generator,
) -> SweepResults:
    """Pilot of `pilot` repeats per cell, then rounds of Neyman allocation until the measured
    half-width is at or below `half_width` or `max_trials` are spent (sweeps stop separately)."""
    k = np.full(q.shape, pilot, np.int64)
    passes = rng.binomial(k, q)
    for _ in range(MAX_ROUNDS):
        a = weights(k, passes, coef)
        state = target_state(k, a, coef, passes, half_width, level)
        total = k.sum((-2, -1))
        active = (state.half_width > half_width) & (total < max_trials)
        if not active.any():
            break
        size = np.where(active, round_size(total, state.needed, max_trials - total), 0)
        add = allocate(k, a, size)
        passes += rng.binomial(add, q)
        k += add
    return _results(k, passes, q, coef, half_width, level)


def simulate_uniform(
    q: FloatArray,
    coef: FloatArray,
    half_width: float,
    *,
    max_trials: int,
    pilot: int = 2,
    level: float = 0.95,
    rng: np.random.Generator,
) -> SweepResults:
    """The same pilot and stopping rule, but every cell gets one more repeat per round."""
    k = np.full(q.shape, pilot, np.int64)
    passes = rng.binomial(k, q)
    cells = q.shape[-2] * q.shape[-1]
    while True:
        _, now, _, _ = measure(k, passes, coef, level)
        total = k.sum((-2, -1))
        active = (now > half_width) & (total + cells <= max_trials)
        if not active.any():
            break
        add = np.broadcast_to(active[..., None, None], k.shape).astype(np.int64)
        passes += rng.binomial(add, q)
        k += add
    return _results(k, passes, q, coef, half_width, level)


def _results(
    k: IntArray,
    passes: IntArray,
    q: FloatArray,
    coef: FloatArray,
    target: float,
    level: float,
    spent: IntArray | int = 0,
) -> SweepResults:
    _, now, _, _ = measure(k, passes, coef, level)
    estimate = contrast(passes / k, coef).mean(-1)
    drawn = np.einsum("c,...ci->...i", np.asarray(coef, float), q).mean(-1)
    return SweepResults(
        estimate,
        now,
        k.sum((-2, -1)) + spent,
        now <= target,
        drawn,
        k,
    )
