"""The population's draw: a distribution that matches its stated probabilities (checked with
scipy's chi-square), fixed by (task, repeat, window) alone, and refused when malformed."""

from __future__ import annotations

from pathlib import Path

import pytest
from scipy import stats

from levelfield.agents import DrawPoint, make_agent
from levelfield.agents.population import (
    Population,
    PopulationAgent,
    choose,
    draw_uniform,
    load_population,
)
from levelfield.config import RunConfig
from levelfield.errors import AgentError, RunConfigError
from levelfield.executor import run

from ..conftest import MakeTask

MIXTURE = {"lean": 0.5, "lean-wrong": 0.1, "hungry-wrong": 0.15, "hungry": 0.25}


def test_draws_follow_the_stated_probabilities() -> None:
    population = Population(probabilities=MIXTURE)
    names = sorted(MIXTURE)
    counts = dict.fromkeys(names, 0)
    for task in range(40):
        for repeat in range(1, 101):
            counts[choose(population, draw_uniform(f"task-{task}", repeat, "default"))] += 1
    n = sum(counts.values())
    observed = [counts[k] for k in names]
    expected = [MIXTURE[k] * n for k in names]
    assert stats.chisquare(observed, expected).pvalue > 0.001


def test_the_draw_reads_task_repeat_and_window_and_nothing_else() -> None:
    u = draw_uniform("csv-totals", 2, "default")
    assert u == draw_uniform("csv-totals", 2, "default")
    assert 0 <= u < 1
    others = {
        draw_uniform("csv-totals", 3, "default"),
        draw_uniform("csv-totals", 2, "evening"),
        draw_uniform("json-merge", 2, "default"),
    }
    assert u not in others and len(others) == 3


def test_reordering_the_file_changes_no_draw() -> None:
    forward = Population(probabilities=MIXTURE)
    backward = Population(probabilities=dict(reversed(MIXTURE.items())))
    for i in range(200):
        u = draw_uniform("t", i, "default")
        assert choose(forward, u) == choose(backward, u)


def test_choose_maps_slots_in_name_order() -> None:
    population = Population(probabilities={"b": 0.25, "a": 0.75})
    assert choose(population, 0.0) == "a"
    assert choose(population, 0.7499) == "a"
    assert choose(population, 0.75) == "b"
    assert choose(population, 0.999999) == "b"
    zero = Population(probabilities={"never": 0.0, "always": 1.0})
    assert {choose(zero, u / 10) for u in range(10)} == {"always"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[probabilities]\nlean = 0.5\nwrong = 0.4\n", "sum to 0.9"),
        ("[probabilities]\nlean = 1.2\nwrong = -0.2\n", "[0, 1]"),
        ("[probabilities]\n", "no trajectory"),
        ('[probabilities]\n"../x" = 1.0\n', "file stems"),
        ("probabilites = {lean = 1.0}\n", "probabilities"),
    ],
)
def test_a_malformed_population_is_refused(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "population.toml"
    path.write_text(text)
    with pytest.raises(AgentError, match="not a valid population") as info:
        load_population(path)
    assert error in str(info.value)


def test_every_listed_trajectory_must_exist(tmp_path: Path) -> None:
    (tmp_path / "lean.json").write_text('{"steps": []}')
    path = tmp_path / "population.toml"
    path.write_text("[probabilities]\nlean = 0.5\nhungry = 0.5\n")
    with pytest.raises(AgentError, match="no trajectory file for hungry"):
        load_population(path)


def test_make_agent_places_the_population_in_the_design() -> None:
    agent = make_agent("population", repeat=3, window="evening")
    assert isinstance(agent, PopulationAgent)
    expected = ("population", "population", DrawPoint(3, "evening"))
    assert (agent.name, agent.source, agent.at) == expected
    assert make_agent("population:mix").source == "mix"  # type: ignore[attr-defined]


def test_a_run_with_a_task_lacking_its_population_is_refused_before_any_trial(
    make_task: MakeTask, tmp_path: Path
) -> None:
    make_task(
        "has",
        files={
            "trajectories/lean.json": '{"steps": []}',
            "trajectories/population.toml": "[probabilities]\nlean = 1.0\n",
        },
    )
    make_task("lacks")
    config = RunConfig(dataset=tmp_path / "dataset", out=tmp_path / "run", agents=["population"])
    with pytest.raises(RunConfigError, match=r"lacks: .*population not found"):
        run(config)
    assert not (tmp_path / "run").exists()
