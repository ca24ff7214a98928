"""Hidden-variable logit: agrees with a statsmodels formula fit written independently, recovers a
planted effect, and never raises on separation or thin data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
import statsmodels.formula.api as smf

from levelfield.analysis.hidden import hidden_variables


def _trials(n_tasks: int, per_task: int, hour_effect: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    task = np.repeat(np.arange(n_tasks), per_task)
    hour = rng.integers(0, 24, task.size)
    load = rng.gamma(2.0, 1.0, task.size)
    logit = rng.normal(0, 1, n_tasks)[task] + hour_effect * (hour - 12)
    passed = rng.random(task.size) < 1 / (1 + np.exp(-logit))
    return pd.DataFrame(
        {
            "task": [f"t{t:02d}" for t in task],
            "agent": "a",
            "policy": "strict",
            "repeat": np.tile(np.arange(per_task), n_tasks),
            "status": np.where(passed, "passed", "failed"),
            "local_hour": hour,
            "host_load1": load,
            "trials_in_flight": 4,
        }
    )


def test_matches_statsmodels_formula_fit_with_task_effects_and_clustered_se() -> None:
    trials = _trials(25, 40, 0.05, seed=1)
    result = hidden_variables(trials)
    assert result is not None and result.estimable
    assert [c.name for c in result.coefficients] == [
        "local_hour",
        "host_load1",
    ]  # in flight constant
    frame = trials.assign(y=(trials["status"] == "passed").astype(float))
    frame = frame[frame.groupby("task")["y"].transform("std") > 0]
    ref = smf.glm(
        "y ~ local_hour + host_load1 + C(task)", frame, family=sm.families.Binomial()
    ).fit(cov_type="cluster", cov_kwds={"groups": pd.factorize(frame["task"])[0]})
    for c in result.coefficients:
        assert c.coef == pytest.approx(ref.params[c.name], rel=1e-6)
        assert c.se == pytest.approx(ref.bse[c.name], rel=1e-6)
        assert c.odds_ratio == pytest.approx(np.exp(c.coef))


def test_recovers_a_planted_hour_effect() -> None:
    result = hidden_variables(_trials(40, 60, 0.08, seed=2))
    assert result is not None and result.estimable
    hour = result.coefficients[0]
    assert hour.ci[0] < 0.08 < hour.ci[1] and hour.p_value < 0.001


def test_no_varying_covariate_means_no_figure() -> None:
    trials = _trials(10, 10, 0.0, seed=3).assign(local_hour=5, host_load1=1.0)
    assert hidden_variables(trials) is None
    assert hidden_variables(trials.drop(columns=["local_hour", "host_load1"])) is None


def test_perfect_separation_is_reported_not_raised() -> None:
    trials = _trials(12, 30, 0.0, seed=4)
    trials["status"] = np.where(trials["local_hour"] >= 12, "passed", "failed")
    result = hidden_variables(trials)
    assert result is not None and not result.estimable
    assert "not estimable" in result.note


def test_too_few_rows_is_not_estimable() -> None:
    result = hidden_variables(_trials(3, 4, 0.0, seed=5))
    assert result is not None and not result.estimable and "too few" in result.note


def test_large_tables_are_subsampled_by_task_with_a_note() -> None:
    result = hidden_variables(_trials(60, 200, 0.05, seed=6), max_cells=200_000)
    assert result is not None and result.estimable
    assert "subsample" in result.note and result.n_rows < 60 * 200


def test_a_covariate_off_its_usual_value_in_a_handful_of_trials_is_not_fitted() -> None:
    """The last trial of a run is often alone in flight: three such trials that happen to fail
    must not become a 'huge effect' of trials in flight."""
    import numpy as np
    import pandas as pd

    from levelfield.analysis.hidden import hidden_variables

    rng = np.random.default_rng(3)
    rows = []
    for task in range(10):
        for repeat in range(40):
            rows.append(
                {
                    "task": f"t{task}",
                    "agent": "a",
                    "policy": "p",
                    "repeat": repeat,
                    "status": "passed" if rng.random() < 0.6 else "failed",
                    "trials_in_flight": 2,
                    "host_load1": float(rng.uniform(0, 2)),
                }
            )
    for row in rows[:3]:
        row.update(trials_in_flight=1, status="failed")
    result = hidden_variables(pd.DataFrame(rows))
    assert result is not None and result.estimable
    assert [c.name for c in result.coefficients] == ["host_load1"]


def test_a_covariate_with_a_narrow_range_is_judged_across_its_range_not_per_unit() -> None:
    """A host load between 2.0 and 2.1 with an ordinary effect (2 log-odds across that range) has
    a per-unit coefficient of about 20: a finding, matching statsmodels, not a separation."""
    rng = np.random.default_rng(7)
    trials = _trials(25, 40, 0.0, seed=7)
    u = rng.random(len(trials))
    trials["host_load1"] = 2.0 + 0.1 * u
    logit = rng.normal(0, 1, 25)[trials["task"].str[1:].astype(int)] + 2.0 * (u - 0.5)
    trials["status"] = np.where(
        rng.random(len(trials)) < 1 / (1 + np.exp(-logit)), "passed", "failed"
    )
    result = hidden_variables(trials)
    assert result is not None and result.estimable, result
    load = next(c for c in result.coefficients if c.name == "host_load1")
    frame = trials.assign(y=(trials["status"] == "passed").astype(float))
    frame = frame[frame.groupby("task")["y"].transform("std") > 0]
    ref = smf.glm(
        "y ~ local_hour + host_load1 + C(task)", frame, family=sm.families.Binomial()
    ).fit(cov_type="cluster", cov_kwds={"groups": pd.factorize(frame["task"])[0]})
    assert load.coef == pytest.approx(ref.params["host_load1"], rel=1e-6)
    assert abs(load.coef) > 10 and load.ci[0] > 0
