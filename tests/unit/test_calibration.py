"""Calibration across ceilings: TOST against statsmodels' ztost, the verdicts and the
recommendation on sweeps with a known truth, and the sample size to decide."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.weightstats import ztost

from levelfield.analysis.calibration import calibrate, tost, tost_tasks_needed
from levelfield.analysis.paired import paired_difference
from levelfield.analysis.simulate import simulate_trials

CEILINGS = {"strict": 1.0, "headroom": 3.0, "uncapped": math.inf}


def _sweep(n_tasks: int, repeats: int, p_by_policy: dict[str, float], seed: int) -> pd.DataFrame:
    """Every task has its own pass rate; each policy shifts it by a fixed amount."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.1, 0.9, n_tasks)
    rows = []
    for policy, shift in p_by_policy.items():
        passed = rng.random((n_tasks, repeats)) < np.clip(base + shift, 0, 1)[:, None]
        for t, r in np.ndindex(n_tasks, repeats):
            rows.append(
                (
                    f"t{t:03d}",
                    "agent",
                    policy,
                    r,
                    "passed" if passed[t, r] else "failed",
                    CEILINGS[policy],
                )
            )
    columns = ["task", "agent", "policy", "repeat", "status", "memory_ceiling_multiple"]
    return pd.DataFrame(rows, columns=columns)


def test_tost_matches_statsmodels_ztost() -> None:
    rng = np.random.default_rng(0)
    for shift in (0.0, 0.01, 0.03):
        d = rng.normal(shift, 0.05, 60)
        estimate = paired_difference(d, np.zeros_like(d), level=0.90)
        p, _ = tost(estimate.diff, estimate.se, 0.02)
        assert p == pytest.approx(ztost(d, -0.02, 0.02)[0], rel=1e-9)


def test_tost_verdicts() -> None:
    assert tost(0.0, 0.005, 0.02)[1] == "equivalent"
    assert tost(0.08, 0.005, 0.02)[1] == "different"
    assert tost(0.0, 0.05, 0.02)[1] == "inconclusive"
    assert math.isnan(tost(0.0, math.nan, 0.02)[0])


def test_tost_with_every_task_differing_alike_is_decided_by_the_point() -> None:
    # se = 0: each task's difference was the same (common draws, no outcome changed), so the
    # 90 % CI is the point itself; a bootstrap over tasks would return it in every resample.
    assert tost(0.0, 0.0, 0.02) == (0.0, "equivalent")
    assert tost(0.05, 0.0, 0.02) == (1.0, "different")
    assert tost(0.0, -1.0, 0.02)[1] == "inconclusive"


def test_tost_sample_size_closed_form() -> None:
    # (z_.95 + z_.9)^2 * 0.01 / 0.02^2 = (1.644854 + 1.281552)^2 * 25 = 214.1...
    expected = (stats.norm.ppf(0.95) + stats.norm.ppf(0.9)) ** 2 * 0.01 / 0.0004
    assert tost_tasks_needed(0.01, 0.02) == pytest.approx(expected)
    assert expected == pytest.approx(214.1, abs=0.1)


def test_identical_policies_are_equivalent_and_the_largest_is_recommended() -> None:
    trials = _sweep(400, 10, {"strict": 0.0, "headroom": 0.0, "uncapped": 0.0}, seed=1)
    (cal,) = calibrate(trials, margin=0.03)
    assert cal.reference == "strict"
    assert [c.verdict for c in cal.checks] == ["equivalent", "equivalent"]
    assert (cal.recommended, cal.verdict) == ("uncapped", "equivalent")


def test_capability_unlock_is_different_and_not_recommended() -> None:
    trials = _sweep(300, 5, {"strict": 0.0, "headroom": 0.0, "uncapped": 0.25}, seed=2)
    (cal,) = calibrate(trials, margin=0.05)
    verdicts = {c.policy: c.verdict for c in cal.checks}
    assert verdicts == {"headroom": "equivalent", "uncapped": "different"}
    assert cal.recommended == "headroom"


def test_inconclusive_says_how_many_tasks_would_decide() -> None:
    trials = _sweep(20, 2, {"strict": 0.0, "headroom": 0.0}, seed=3)
    (cal,) = calibrate(trials, margin=0.02)
    (check,) = cal.checks
    assert check.verdict == "inconclusive" and cal.verdict == "inconclusive"
    assert cal.recommended == "strict"
    assert check.tasks_needed > check.n_tasks
    assert check.repeats_needed >= 1  # a number, or inf when repeats alone cannot suffice


def test_reference_is_the_smallest_ceiling_whatever_the_names() -> None:
    trials = simulate_trials(n_tasks=30, policies={"b": 4.0, "a": 2.0, "c": 1.5}, seed=4)
    (cal,) = calibrate(trials)
    assert cal.reference == "c" and cal.reference_ceiling == 1.5
    assert [c.policy for c in cal.checks] == ["a", "b"]
