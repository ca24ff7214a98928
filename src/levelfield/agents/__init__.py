"""Agents: what acts in the sandbox during the agent phase.

`oracle` runs the task's reference solution, `nop` does nothing (a task that passes with it is
broken), `replay` runs a recorded trajectory of commands with their timing, so one model's
behaviour can be replayed under every policy. An agent is named by a string, as the store and
reports show it: "oracle", "nop", "replay:lean" (the task's trajectories/lean.json) or
"replay:/path/to/{task}.json".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from levelfield.errors import RunConfigError
from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task


@dataclass(frozen=True, slots=True)
class AgentRun:
    """The agent phase as it happened: the phase result and the commands it executed."""

    phase: PhaseResult
    steps: tuple[dict[str, object], ...] = ()


class Agent(Protocol):
    name: str

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun: ...


def make_agent(spec: str) -> Agent:
    kind, _, arg = spec.partition(":")
    if kind == "oracle":
        from levelfield.agents.oracle import OracleAgent

        return OracleAgent()
    if kind == "nop":
        from levelfield.agents.nop import NopAgent

        return NopAgent()
    if kind == "replay":
        from levelfield.agents.replay import ReplayAgent

        if not arg:
            raise RunConfigError("replay needs a trajectory: replay:NAME or replay:/path/file.json")
        return ReplayAgent(spec, arg)
    raise RunConfigError(f"unknown agent {spec!r}: use oracle, nop or replay:TRAJECTORY")
