"""The nop agent does nothing: a task that passes with it tests nothing."""

from __future__ import annotations

from pathlib import Path

from levelfield.agents import AgentOptions, AgentRun, DrawPoint
from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task


class NopAgent:
    name = "nop"
    needs_network = False

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        return AgentRun(PhaseResult(exit_code=0))


def create(spec: str, options: AgentOptions, at: DrawPoint) -> NopAgent:
    return NopAgent()
