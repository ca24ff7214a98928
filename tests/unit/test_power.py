"""Miller's sample size against statsmodels' NormalIndPower and the closed form, and against a
simulation: at the n it prescribes, a paired test detects the gap about `power` of the time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import NormalIndPower

from levelfield.analysis.power import power_analysis, required_tasks
from levelfield.analysis.simulate import simulate_trials


def test_worked_example_by_hand() -> None:
    # gap 2 points, Var_task_diff 0.01, E[sigma^2] 0.3, K 3: variance 0.01 + 0.1 = 0.11.
    # (1.959964 + 0.841621)^2 = 7.848879; n = 7.848879 * 0.11 / 0.0004 = 2158.44
    assert required_tasks(0.02, 0.01, 0.3, 3) == pytest.approx(2158.44, abs=0.01)


@pytest.mark.parametrize(
    ("gap", "var_diff", "within", "k"), [(0.02, 0.01, 0.3, 3), (0.05, 0.05, 0.2, 1)]
)
def test_matches_statsmodels_normal_power(
    gap: float, var_diff: float, within: float, k: int
) -> None:
    """A paired test on n per-task differences is a one-sample z-test: NormalIndPower with
    ratio=0. statsmodels also counts the far tail, which moves n by < 0.01 %."""
    sd = math.sqrt(var_diff + within / k)
    ref = NormalIndPower().solve_power(effect_size=gap / sd, alpha=0.05, power=0.8, ratio=0)
    assert required_tasks(gap, var_diff, within, k) == pytest.approx(ref, rel=1e-4)


def test_more_repeats_need_fewer_tasks_down_to_the_between_task_floor() -> None:
    n = [required_tasks(0.03, 0.02, 0.25, k) for k in (1, 2, 3, 5, 10, 10**9)]
    assert n == sorted(n, reverse=True)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert n[-1] == pytest.approx(z**2 * 0.02 / 0.03**2, rel=1e-6)
    assert math.isnan(required_tasks(0.0, 0.02, 0.25, 1))


def test_prescribed_n_reaches_the_nominal_power_in_simulation() -> None:
    gap, var_diff, within, k = 0.05, 0.02, 0.25, 2
    n = math.ceil(required_tasks(gap, var_diff, within, k))
    rng = np.random.default_rng(0)
    sims = 4000
    true_d = gap + rng.normal(0, math.sqrt(var_diff), (sims, n))
    observed = true_d + rng.normal(0, math.sqrt(within / k), (sims, n))
    z = observed.mean(axis=1) / (observed.std(axis=1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(z) > stats.norm.ppf(0.975)) == pytest.approx(0.8, abs=0.03)


def test_power_analysis_on_a_sweep_gives_the_table() -> None:
    trials = simulate_trials(n_tasks=60, repeats=4, seed=1)
    result = power_analysis(trials, gap=0.02)
    assert [r.repeats for r in result.rows] == [1, 2, 3, 5, 10]
    tasks = [r.tasks for r in result.rows]
    assert tasks == sorted(tasks, reverse=True)
    assert all(r.trials == r.tasks * r.repeats for r in result.rows)
    assert " vs " in result.source and result.measured_tasks == 60
    assert result.tasks_needed == pytest.approx(
        required_tasks(0.02, result.var_task_diff, result.mean_within_var, 4)
    )


def test_single_configuration_assumes_independent_sides() -> None:
    trials = simulate_trials(n_tasks=40, policies={"strict": 1.0}, repeats=3, seed=2)
    result = power_analysis(trials, gap=0.05)
    assert "independent" in result.source
    assert all(not math.isnan(r.tasks) for r in result.rows)


def test_one_repeat_gives_only_the_measured_row() -> None:
    trials = simulate_trials(n_tasks=40, repeats=1, seed=3)
    result = power_analysis(trials, gap=0.05)
    defined = [r.repeats for r in result.rows if not math.isnan(r.tasks)]
    assert defined == [1]
