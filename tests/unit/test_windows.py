"""Score by hour and window, and the test of whether windows differ: Friedman's statistic and its
χ² p-value against scipy, the permutation p-value against a brute-force enumeration written here
independently, the clustered CIs against a direct computation."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from levelfield.analysis.nodes import node_health
from levelfield.analysis.windows import friedman_permutation, time_breakdown, window_tests


def _brute_force_p(scores: np.ndarray) -> float:
    """Every arrangement of each task's scores over the windows, the statistic by scipy."""
    def stat(table: np.ndarray) -> float:
        return float(stats.friedmanchisquare(*table.T).statistic)

    observed = stat(scores)
    rows = [list(itertools.permutations(row)) for row in scores]
    hits = total = 0
    for choice in itertools.product(*rows):
        hits += stat(np.array(choice)) >= observed - 1e-9
        total += 1
    return hits / total


@pytest.mark.parametrize("seed", [0, 1])
def test_friedman_matches_scipy_and_exact_p_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, size=(4, 3)) / 3  # per-task scores of K = 3: many ties
    while np.all(scores == scores[:, :1]):
        scores = rng.integers(0, 4, size=(4, 3)) / 3
    statistic, p, method, p_chi2 = friedman_permutation(scores)
    reference = stats.friedmanchisquare(*scores.T)
    assert statistic == pytest.approx(reference.statistic, rel=1e-9)
    assert p_chi2 == pytest.approx(reference.pvalue, rel=1e-9)
    assert method == "permutation exact"
    assert p == pytest.approx(_brute_force_p(scores), abs=1e-12)


def test_monte_carlo_p_is_close_to_the_exact_one() -> None:
    rng = np.random.default_rng(5)
    scores = rng.random((6, 3)) + np.array([0.0, 0.3, 0.6])
    exact = friedman_permutation(scores)[1]
    import levelfield.analysis.windows as w

    saved = w.EXACT_MAX_ARRANGEMENTS
    w.EXACT_MAX_ARRANGEMENTS = 1
    try:
        _, mc, method, _ = friedman_permutation(scores, seed=3, n_permutations=20_000)
    finally:
        w.EXACT_MAX_ARRANGEMENTS = saved
    assert method == "permutation Monte Carlo"
    assert mc == pytest.approx(exact, abs=0.01)


def test_all_tied_is_not_a_difference() -> None:
    statistic, p, method, _ = friedman_permutation(np.ones((4, 3)))
    assert math.isnan(statistic) and p == 1.0 and method == "all tied"


def _windowed(effect: float, seed: int, n_tasks: int = 8, k: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(n_tasks):
        base = rng.uniform(0.2, 0.8)
        for w in range(3):
            for r in range(k):
                p = min(1.0, max(0.0, base + effect * w))
                status = "passed" if rng.random() < p else (
                    "infra_error" if rng.random() < 0.2 else "failed")
                rows.append({"task": f"t{t}", "agent": "a", "policy": "strict", "repeat": r,
                             "window": f"2026-12-0{w + 1}T06", "status": status,
                             "local_hour": 6 + w})
    return pd.DataFrame(rows)


def test_window_tests_pair_by_task_and_see_a_planted_difference() -> None:
    none = window_tests(_windowed(0.0, seed=1))
    strong = window_tests(_windowed(0.4, seed=1, n_tasks=12))
    assert len(none) == 1 and none[0].n_tasks == 8 and len(none[0].windows) == 3
    assert strong[0].p_value < 0.01 < none[0].p_value
    # the same numbers as scipy on the per-task score table
    trials = _windowed(0.0, seed=1)
    table = (trials.assign(y=trials["status"] == "passed")
             .pivot_table(index="task", columns="window", values="y", aggfunc="mean"))
    assert none[0].p_chi2 == pytest.approx(stats.friedmanchisquare(*table.to_numpy().T).pvalue)


def test_slots_are_task_clustered_means_with_wilson_beside() -> None:
    trials = _windowed(0.2, seed=4)
    time = time_breakdown(trials)
    assert [s.label for s in time.by_window] == sorted(trials["window"].unique())
    assert [s.label for s in time.by_hour] == ["06h", "07h", "08h"]
    first = trials[trials["window"] == time.by_window[0].label]
    per_task = first.assign(y=first["status"] == "passed").groupby("task")["y"].mean()
    slot = time.by_window[0]
    assert slot.score.mean == pytest.approx(per_task.mean())
    assert slot.score.se == pytest.approx(per_task.std(ddof=1) / math.sqrt(len(per_task)))
    passed = int((first["status"] == "passed").sum())
    ci = stats.binomtest(passed, len(first)).proportion_ci(method="wilson")
    assert slot.score_wilson == pytest.approx((ci.low, ci.high))
    infra = first.assign(y=first["status"] == "infra_error").groupby("task")["y"].mean()
    assert time.by_window[0].infra_error_rate.mean == pytest.approx(infra.mean())


def test_a_node_far_off_the_others_is_flagged() -> None:
    rows = []
    for node, cpu, steal in (("a", 2.0, 0.1), ("b", 3.0, 0.2), ("c", 40.0, 0.15)):
        for i in range(5):
            rows.append({"node": node, "cpu_pressure_pct": cpu + i * 0.1, "steal_pct": steal,
                         "memory_pressure_pct": 0.0, "io_pressure_pct": 1.0,
                         "admission_wait_s": 0.0})
    nodes = {n.node: n for n in node_health(pd.DataFrame(rows))}
    assert nodes["c"].flags and "cpu_pressure_pct" in nodes["c"].flags[0]
    assert not nodes["a"].flags and not nodes["b"].flags
    assert nodes["c"].medians["cpu_pressure_pct"] == pytest.approx(40.2)
    one = node_health(pd.DataFrame(rows[:5]))
    assert len(one) == 1 and not one[0].flags
