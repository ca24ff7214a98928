"""The oracle runs `solution/solve.sh`: it measures the environment, not a model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from levelfield.agents import AgentOptions, AgentRun, DrawPoint, refuse_unrunnable
from levelfield.errors import AgentError
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task

SOLVE = "bash /solution/solve.sh"


class OracleAgent:
    name = "oracle"
    needs_network = False

    def check(self, tasks: Sequence[Task]) -> None:
        """A task without solution/solve.sh is refused before the run: the oracle has nothing
        to run there, which says nothing of the environment it measures."""
        refuse_unrunnable(self.name, tasks, _require_solution)

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        _require_solution(task)
        box.copy_in(task.solution_dir, PurePosixPath("/solution"))
        phase = box.exec(SOLVE, timeout_s=timeout_s, log_path=trial_dir / "agent.log")
        step = {
            "command": SOLVE,
            "delay_s": 0.0,
            "exit_code": phase.exit_code,
            "duration_s": round(phase.duration_s, 3),
        }
        return AgentRun(phase, (step,))


def _require_solution(task: Task) -> None:
    if not task.has_solution:
        missing = task.solution_dir / "solve.sh"
        raise AgentError(f"{missing} is missing: the oracle has nothing to run")


def create(spec: str, options: AgentOptions, at: DrawPoint) -> OracleAgent:
    return OracleAgent()
