"""Per-task differences → the sign-flip p-value, exact at any number of tasks where it can be.

Under H0 ("the per-task differences are symmetric about 0") each difference's sign is a fair coin,
and the p-value is the share of the 2^n sign patterns whose |sum| reaches the observed one. Two
ways compute it exactly:

- **on a lattice** (the usual case): a task's score is passes / K, so a difference of two scores
  is a multiple of 1/L for L the least common multiple of the K's (5 on Terminal-Bench, 60 for
  clean scores with 1-5 clean trials). On that lattice the flipped sum is an integer, and its
  distribution is a product of binomials, one per distinct |difference| (tasks sharing a value
  are exchangeable): a few convolutions instead of 2^89 patterns, exact to rounding. The lower
  tail is summed from its own terms, never as 1 − cdf, so a p-value of 1e-20 keeps its digits;
- **by enumeration** of every pattern when there are at most EXACT_MAX_N tasks.

Otherwise (differences off any small lattice, with many tasks) it is the normal approximation of
the same sign-flip distribution (mean 0, variance sum d²), which also keeps its resolution.
There is no Monte Carlo: a Monte Carlo p-value has a floor of 1 / (1 + resamples), which Holm
multiplies by the number of pairs, so that over 1,485 pairs even a 40-point gap with p far below
0.001 would come out "not distinguishable".
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray
from scipy import special

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

EXACT_MAX_N = 16  # 2^16 = 65,536 sign patterns: enumeration still takes milliseconds
# The largest denominator a per-task score can have and still be found: K up to 2,520 repeats,
# or an lcm of several K's up to that (lcm(1..10) = 2,520).
MAX_DENOMINATOR = 2520
# Lattice units summed over tasks beyond which the convolutions cost more than they are worth
# (89 tasks at L = 2,520 is 224,280); the normal approximation takes over past it.
MAX_SUPPORT = 1_000_000
_LATTICE_TOLERANCE = 1e-9

EXACT = "sign-flip exact"
NORMAL = "sign-flip normal approximation"


def sign_flip_pvalue(d: FloatArray) -> tuple[float, str]:
    """Two-sided p-value of H0 "the per-task differences are symmetric about 0" for the statistic
    |sum(d)|, and the method used. NaN differences are left out; none left is NaN, "none"."""
    d = np.asarray(d, float)
    d = d[~np.isnan(d)]
    if d.size == 0:
        return math.nan, "none"
    lattice = lattice_units(d)
    if lattice is not None:
        return lattice_pvalue(lattice), EXACT
    if d.size <= EXACT_MAX_N:
        return enumerated_pvalue(d), EXACT
    scale = math.sqrt(float(np.sum(d * d)))
    return float(2 * special.ndtr(-abs(float(d.sum())) / scale)), NORMAL


def lattice_units(d: FloatArray) -> IntArray | None:
    """`d` as signed integers on the coarsest lattice 1/L that holds every value, or None when
    no L up to MAX_DENOMINATOR does or the lattice is too fine to convolve on."""
    magnitudes = np.unique(np.abs(d))
    magnitudes = magnitudes[magnitudes > 0]
    if magnitudes.size == 0:
        return np.zeros(d.size, np.int64)
    common = 1
    for value in magnitudes.tolist():
        denominator = _denominator(value)
        if denominator is None:
            return None
        common = math.lcm(common, denominator)
        if common > MAX_DENOMINATOR:
            return None
    if common * float(np.abs(d).sum()) > MAX_SUPPORT:
        return None
    return np.rint(d * common).astype(np.int64)


@functools.lru_cache(maxsize=4096)
def _denominator(value: float) -> int | None:
    """The denominator (at most MAX_DENOMINATOR) of the fraction `value` is to rounding, or None.
    Cached: a leaderboard's differences take a handful of distinct values (k/5 for K = 5)."""
    fraction = Fraction(value).limit_denominator(MAX_DENOMINATOR)
    if abs(float(fraction) - value) > _LATTICE_TOLERANCE * max(1.0, value):
        return None
    return fraction.denominator


def lattice_pvalue(units: IntArray) -> float:
    """Exact p-value for integer differences: P(|S| >= |s|) for S = sum of e_t * |u_t| with fair
    signs e_t. With T the sum of the flipped |u_t| (S = A − 2T, A = sum |u_t|), T is symmetric
    about A/2, so the p-value is twice the lower tail P(T <= (A − |s|) / 2)."""
    magnitudes = np.abs(units)
    observed = abs(int(units.sum()))
    if observed == 0:
        return 1.0
    total = int(magnitudes.sum())
    counts = np.bincount(magnitudes)
    values = np.flatnonzero(counts)
    values = values[values > 0]
    pmf = flipped_sum_pmf(values, counts[values])
    lower = float(pmf[: (total - observed) // 2 + 1].sum())
    return min(1.0, 2 * lower)


def flipped_sum_pmf(values: IntArray, counts: IntArray) -> FloatArray:
    """Distribution of T = sum over distinct values a of a * B_a, B_a ~ Binomial(count_a, 1/2),
    on 0..sum(a * count_a). Each factor is a binomial on a stride of a, convolved one residue
    class mod a at a time, so no step touches the zeros between the stride's points."""
    pmf = np.ones(1)
    for a, m in zip(values.tolist(), counts.tolist(), strict=True):
        kernel = _binomial_half(m)
        out = np.zeros(pmf.size + a * m)
        for r in range(min(a, pmf.size)):
            out[r::a] = np.convolve(pmf[r::a], kernel)
        pmf = out
    return pmf


@functools.lru_cache(maxsize=1024)
def _binomial_half(m: int) -> FloatArray:
    """Binomial(m, 1/2) probabilities, from log-gamma so that m past 1,023 does not overflow."""
    k = np.arange(m + 1)
    log_pmf = special.gammaln(m + 1) - special.gammaln(k + 1) - special.gammaln(m - k + 1)
    pmf = np.exp(log_pmf - m * math.log(2))
    pmf.setflags(write=False)
    return pmf


def enumerated_pvalue(d: FloatArray) -> float:
    """Every sign pattern of at most EXACT_MAX_N differences, counted; a relative tolerance keeps
    float sums that equal the observed one from falling on the wrong side of it."""
    observed = abs(float(d.sum()))
    tolerance = 1e-9 * max(1.0, float(np.abs(d).sum()))
    patterns = np.arange(2**d.size)[:, None] >> np.arange(d.size) & 1
    totals = (1 - 2 * patterns) @ d
    return float(np.mean(np.abs(totals) >= observed - tolerance))
