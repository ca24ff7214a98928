"""A population of recorded behaviours: each trial replays one of the task's trajectories, drawn
with stated probabilities, like a model that sometimes takes the lean way, sometimes a heavier one,
and sometimes gets the answer wrong.

`trajectories/population.toml` (or `population:NAME` → `trajectories/NAME.toml`):
    [probabilities]
    lean = 0.5           # trajectories/lean.json: lean and correct
    lean-wrong = 0.2     # lean, but the answer is wrong
    hungry-wrong = 0.3   # peaks above 1x: OOM-killed there, fails its tests when it survives

The draw is seeded by (task, repeat, window) and by nothing else: every policy meets the same
behaviour on the same trial (common random numbers), so a paired comparison of policies sees the
infrastructure's effect and none of the draw's. Nothing here reads the policy: every kill still
comes from the kernel. The name drawn is stored with the trial (`TrialRecord.trajectory`).
"""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from levelfield.agents import AgentOptions, AgentRun, DrawPoint, refuse_unrunnable
from levelfield.agents.replay import ReplayAgent
from levelfield.errors import AgentError
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task

DEFAULT_POPULATION = "population"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SUM_TOLERANCE = 1e-6  # probabilities written with a few decimals still sum to 1


class Population(BaseModel):
    """A task's mixture of trajectories; refused unless the probabilities sum to 1."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = Field("", description="What behaviour this mixture models, for readers.")
    probabilities: dict[str, float] = Field(
        description="Trajectory name (trajectories/NAME.json) → probability of drawing it."
    )

    @field_validator("probabilities")
    @classmethod
    def _a_distribution(cls, value: dict[str, float]) -> dict[str, float]:
        if not value:
            raise ValueError("lists no trajectory")
        bad = [n for n in value if not _NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"trajectory names must be plain file stems, not {bad}")
        if any(not 0 <= p <= 1 for p in value.values()):
            raise ValueError("every probability must lie in [0, 1]")
        total = math.fsum(value.values())
        if abs(total - 1) > _SUM_TOLERANCE:
            raise ValueError(f"probabilities sum to {total:g}, not 1")
        return value


def load_population(path: Path) -> Population:
    try:
        population = Population.model_validate(tomllib.loads(path.read_text()))
    except FileNotFoundError:
        raise AgentError(f"{path}: population not found") from None
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise AgentError(f"{path}: not a valid population: {exc}") from exc
    missing = [n for n in population.probabilities if not (path.parent / f"{n}.json").is_file()]
    if missing:
        raise AgentError(f"{path}: no trajectory file for {', '.join(sorted(missing))}")
    return population


def draw_uniform(task: str, repeat: int, window: str) -> float:
    """A number in [0, 1) fixed by (task, repeat, window): the same under every policy, and
    independent between repeats. 64 bits of SHA-256, so no two trials share it by accident."""
    identity = "\x1f".join(("population", task, str(repeat), window))
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big") / 2**64


def choose(population: Population, u: float) -> str:
    """The trajectory whose cumulative-probability slot holds `u`. Names are taken in sorted
    order, so reordering the file does not change any draw."""
    cumulative = 0.0
    names = sorted(n for n, p in population.probabilities.items() if p > 0)
    for name in names:
        cumulative += population.probabilities[name]
        if u < cumulative:
            return name
    return names[-1]  # u just below 1 when the sum rounds under it


class PopulationAgent:
    needs_network = False

    def __init__(self, name: str, source: str, at: DrawPoint) -> None:
        self.name, self.source, self.at = name, source, at

    def population_path(self, task: Task) -> Path:
        return task.path / "trajectories" / f"{self.source}.toml"

    def check(self, tasks: Sequence[Task]) -> None:
        """Every task's population loads, or the run is refused before its first trial: a
        missing file is bad input, not a failure to book against the agent."""
        refuse_unrunnable(self.name, tasks, lambda t: load_population(self.population_path(t)))

    def draw(self, task: Task) -> str:
        population = load_population(self.population_path(task))
        return choose(population, draw_uniform(task.name, self.at.repeat, self.at.window))

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        drawn = self.draw(task)
        replay = ReplayAgent(self.name, drawn)
        result = replay.run(box, task, timeout_s=timeout_s, trial_dir=trial_dir)
        return AgentRun(result.phase, result.steps, result.api_calls, drawn=drawn)


def create(spec: str, options: AgentOptions, at: DrawPoint) -> PopulationAgent:
    return PopulationAgent(spec, spec.partition(":")[2] or DEFAULT_POPULATION, at)
