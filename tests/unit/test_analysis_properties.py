"""Properties: intervals cover the true value at about their nominal rate on simulated sweeps,
results do not depend on the order of the rows, the decomposition is exact, Holm never lowers a
p-value. Hypothesis draws the shape of the data; each example runs a vectorised batch of
simulations, so coverage is a rate over hundreds of datasets, not one."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from levelfield.analysis import compare, summarize
from levelfield.analysis.decomposition import split
from levelfield.analysis.estimators import bootstrap_means, clustered_mean, percentile_ci
from levelfield.analysis.jsonable import dumps
from levelfield.analysis.paired import holm
from levelfield.analysis.simulate import simulate_trials

FAST = settings(max_examples=8, deadline=None, derandomize=True)
SIMS = 300  # coverage of a 95 % CI over 300 datasets: sd 1.3 points


def _coverage(n_tasks: int, repeats: int, a: float, b: float, seed: int) -> tuple[float, float]:
    """Share of SIMS datasets whose analytic and bootstrap 95 % CIs contain the population
    mean pass rate a/(a+b) (tasks drawn from Beta(a, b), then K Bernoulli repeats each)."""
    rng = np.random.default_rng(seed)
    truth = a / (a + b)
    task = np.repeat(np.arange(n_tasks), repeats)
    analytic = boot = 0
    for i in range(SIMS):
        p = rng.beta(a, b, n_tasks)
        y = (rng.random(task.size) < p[task]).astype(float)
        est = clustered_mean(y, task)
        analytic += est.ci[0] <= truth <= est.ci[1]
        per_task = y.reshape(n_tasks, repeats).mean(axis=1)
        lo, hi = percentile_ci(bootstrap_means(per_task, n_resamples=400, seed=i))
        boot += lo <= truth <= hi
    return analytic / SIMS, boot / SIMS


@FAST
@given(
    n_tasks=st.integers(30, 120),
    repeats=st.integers(1, 5),
    a=st.floats(0.5, 4.0),
    b=st.floats(0.5, 4.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_intervals_cover_the_true_rate_at_about_the_nominal_rate(
    n_tasks: int, repeats: int, a: float, b: float, seed: int
) -> None:
    analytic, boot = _coverage(n_tasks, repeats, a, b, seed)
    # Nominal 0.95; a normal interval on 30 skewed tasks runs a point or two low.
    assert 0.88 <= analytic <= 0.99
    assert 0.87 <= boot <= 0.99


def _fingerprint(trials: pd.DataFrame) -> str:
    return summarize(trials, n_resamples=100, seed=3).to_json()


@settings(max_examples=5, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), order=st.randoms(use_true_random=False))
def test_results_do_not_depend_on_row_order(seed: int, order: object) -> None:
    trials = simulate_trials(n_tasks=12, agents=("a", "b"), repeats=2, seed=seed)
    positions = list(range(len(trials)))
    order.shuffle(positions)  # type: ignore[attr-defined]
    shuffled = trials.iloc[positions].reset_index(drop=True)
    assert _fingerprint(shuffled) == _fingerprint(trials)
    assert dumps(compare(shuffled, by="agent")) == dumps(compare(trials, by="agent"))


@FAST
@given(
    values=st.lists(st.floats(0.0, 1.0), min_size=4, max_size=4),
)
def test_decomposition_parts_always_sum_to_the_score_change(values: list[float]) -> None:
    c1, e1, c2, e2 = values
    e1, e2 = min(e1, 0.99), min(e2, 0.99)
    s1, s2 = (1 - e1) * c1, (1 - e2) * c2
    noise, unlock = split(np.array(s1), np.array(e1), np.array(s2), np.array(e2))
    assert abs(float(noise + unlock) - (s2 - s1)) < 1e-12


@FAST
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_holm_never_lowers_a_p_value_and_keeps_their_order(p: list[float]) -> None:
    adjusted = holm(p)
    assert np.all(adjusted >= np.asarray(p) - 1e-15) and np.all(adjusted <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(adjusted[order]) >= -1e-15)
