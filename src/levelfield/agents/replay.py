"""Replay a recorded trajectory: the same commands, with the same pauses, under any policy.

Format (what every agent writes as trajectory.json):
    {"schema_version": 1, "steps": [
        {"command": "python3 build.py", "delay_s": 2.0, "timeout_s": 60},
        {"command": "python3 lean.py", "when": "previous_failed"}]}
`delay_s` is the thinking time before the command; `when` (always | previous_failed |
previous_succeeded) lets a trajectory fall back, e.g. to a lean method after an OOM kill. The
agent timeout bounds the whole phase, pauses included.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from levelfield.agents import AgentOptions, AgentRun, DrawPoint, refuse_unrunnable
from levelfield.errors import AgentError, RunConfigError
from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task


class Step(BaseModel):
    model_config = ConfigDict(extra="ignore")  # recorded fields (exit_code, duration_s) ride along
    command: str
    delay_s: float = Field(0.0, ge=0)
    timeout_s: float | None = Field(None, gt=0)
    when: Literal["always", "previous_failed", "previous_succeeded"] = "always"


class Trajectory(BaseModel):
    model_config = ConfigDict(extra="ignore")
    schema_version: Literal[1] = 1
    steps: list[Step]


def load_trajectory(path: Path) -> Trajectory:
    try:
        return Trajectory.model_validate(json.loads(path.read_text()))
    except FileNotFoundError:
        raise AgentError(f"{path}: trajectory not found") from None
    except (json.JSONDecodeError, ValidationError) as exc:
        raise AgentError(f"{path}: not a valid trajectory: {exc}") from exc


class ReplayAgent:
    needs_network = False

    def __init__(self, name: str, source: str) -> None:
        self.name, self.source = name, source

    def trajectory_path(self, task: Task) -> Path:
        """'lean' → the task's trajectories/lean.json; a path may say {task}."""
        if "/" in self.source or self.source.endswith(".json"):
            return Path(self.source.replace("{task}", task.name))
        return task.path / "trajectories" / f"{self.source}.json"

    def check(self, tasks: Sequence[Task]) -> None:
        """Every task's trajectory loads, or the run is refused before its first trial."""
        refuse_unrunnable(self.name, tasks, lambda t: load_trajectory(self.trajectory_path(t)))

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        trajectory = load_trajectory(self.trajectory_path(task))
        deadline = time.monotonic() + timeout_s
        started = time.monotonic()
        done: list[dict[str, object]] = []
        last: PhaseResult | None = None
        for step in trajectory.steps:
            if not _applies(step, last):
                continue
            if time.monotonic() + step.delay_s >= deadline:
                return AgentRun(_timed_out(started, last), tuple(done))
            time.sleep(step.delay_s)
            budget = deadline - time.monotonic()
            limit = min(budget, step.timeout_s) if step.timeout_s else budget
            last = box.exec(step.command, timeout_s=limit, log_path=trial_dir / "agent.log")
            done.append(
                {
                    "command": step.command,
                    "delay_s": step.delay_s,
                    "when": step.when,
                    "exit_code": last.exit_code,
                    "duration_s": round(last.duration_s, 3),
                }
            )
            if last.timed_out and limit >= budget:
                return AgentRun(_timed_out(started, last), tuple(done))
        phase = last or PhaseResult(exit_code=0)
        return AgentRun(
            phase.model_copy(update={"duration_s": time.monotonic() - started}), tuple(done)
        )


def _applies(step: Step, last: PhaseResult | None) -> bool:
    failed = last is not None and (last.timed_out or last.exit_code != 0)
    if step.when == "previous_failed":
        return failed
    if step.when == "previous_succeeded":
        return last is not None and not failed
    return True


def _timed_out(started: float, last: PhaseResult | None) -> PhaseResult:
    tail = last.output_tail if last else ""
    return PhaseResult(
        exit_code=None, timed_out=True, duration_s=time.monotonic() - started, output_tail=tail
    )


def create(spec: str, options: AgentOptions, at: DrawPoint) -> ReplayAgent:
    trajectory = spec.partition(":")[2]
    if not trajectory:
        raise RunConfigError("replay needs a trajectory: replay:NAME or replay:/path/file.json")
    return ReplayAgent(spec, trajectory)
