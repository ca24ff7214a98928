"""`echo:TEXT`: writes TEXT to answer.txt in the task's working directory, and nothing else."""

from __future__ import annotations

import shlex
from pathlib import Path

from levelfield.agents import AgentOptions, AgentRun, DrawPoint
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task


class EchoAgent:
    needs_network = False

    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        command = f"printf %s {shlex.quote(self.text)} > answer.txt"
        phase = box.exec(command, timeout_s=timeout_s, log_path=trial_dir / "agent.log")
        return AgentRun(phase, steps=({"command": command},))


def create(spec: str, options: AgentOptions, at: DrawPoint) -> EchoAgent:
    return EchoAgent(spec, spec.partition(":")[2])
