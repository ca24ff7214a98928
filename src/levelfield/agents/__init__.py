"""Agents: what acts in the sandbox during the agent phase.

`oracle` runs the task's reference solution, `nop` does nothing (a task that passes with it is
broken), `replay` runs a recorded trajectory of commands with their timing, `population` replays
one of a task's trajectories drawn per trial with stated probabilities, `command` installs and
runs any CLI agent inside the sandbox (presets `claude-code`, `codex`, `gemini-cli`), and
`terminal` is a compact built-in loop that asks a model for commands. An agent is named by a
string, as the store and the reports show it: "oracle", "replay:lean", "terminal:gpt-4.1",
"claude-code:claude-sonnet-4-5".

Agents are registered the way sandbox backends are: `_AGENTS` maps a name to the module that
builds it, loaded only when that agent is used (an SDK or a preset table costs nothing
otherwise). Each module offers `create(spec, options, at) -> Agent` and, when its label carries
more than its name (a model, a command's name), `label(kind, options) -> str`.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from levelfield.errors import AgentError, RunConfigError
from levelfield.model_api.cost import PriceTable
from levelfield.records import AgentReport, AgentSetup, ApiCall, ModelBudget, PhaseResult
from levelfield.sandbox import ReadOnlyMount, Sandbox
from levelfield.tasks import Task


@dataclass(frozen=True, slots=True)
class AgentRun:
    """The agent phase as it happened: the phase result and the commands it executed."""

    phase: PhaseResult
    steps: tuple[dict[str, object], ...] = ()
    api_calls: tuple[ApiCall, ...] = field(default_factory=tuple)
    drawn: str | None = None  # the trajectory a population drew for this trial
    report: AgentReport | None = None  # what a CLI agent said about its own run


class Agent(Protocol):
    """What the runner calls. An agent may also be a `MountsAgent`, a `SetupAgent` (a CLI
    agent is both) or a `CheckingAgent`; the runner asks which with isinstance."""

    name: str
    needs_network: bool

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun: ...


@runtime_checkable
class MountsAgent(Protocol):
    """An agent with host trees to bind read-only into the sandbox (a CLI prepared on the host);
    `mounts` may prepare them, once per host."""

    def mounts(self) -> tuple[ReadOnlyMount, ...]: ...


@runtime_checkable
class CheckingAgent(Protocol):
    """An agent that reads per-task inputs (a solution, a recorded trajectory, a population)
    or refuses a setting: `check` raises before the run for the tasks it cannot serve."""

    def check(self, tasks: Sequence[Task]) -> None: ...


@runtime_checkable
class SetupAgent(Protocol):
    """An agent with an install phase of its own (`agent_setup`), under the trial's limits."""

    setup_timeout_s: float

    def setup(
        self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path
    ) -> AgentSetup | None: ...


class AgentOptions(BaseModel):
    """Settings of the model-driven agents. The API key is a SecretStr: it reaches the agent
    process (or the model client) and nothing else — not the store, the logs or the reports."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    model: str | None = Field(None, description="Model name passed to the agent or the API.")
    base_url: str | None = Field(None, description="OpenAI-compatible endpoint (vLLM, Ollama...).")
    provider: str | None = Field(None, description="openai or anthropic; guessed from the model.")
    install: str | None = Field(None, description="Shell command installing a CLI agent.")
    command: str | None = Field(
        None,
        description="Shell command running it; the instruction "
        "is in $LEVELFIELD_INSTRUCTION and $LEVELFIELD_INSTRUCTION_FILE.",
    )
    name: str | None = Field(None, description="Label of a `command` agent in reports.")
    install_mode: Literal["sandbox", "mounted"] = Field(
        "sandbox",
        description="sandbox: install inside each trial, under its limits, in the agent_setup "
        "phase; mounted: prepare once on the host and mount read-only into every sandbox.",
    )
    agent_version: str | None = Field(
        None, description="npm version (or dist-tag) of a preset CLI agent; default latest."
    )
    setup_timeout_s: float = Field(600.0, gt=0, description="Timeout of the agent_setup phase.")
    agent_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for a CLI agent (not secret)."
    )
    network: bool = Field(
        False,
        description="Give a CLI agent the outside network whatever the task says (an install "
        "in the sandbox gets it anyway; the model API needs none: the proxy is on the "
        "sandbox's own loopback).",
    )
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    api_key_file: Path | None = Field(None, description="File holding the API key.")
    max_turns: int = Field(30, ge=1, description="Model calls the terminal agent may make.")
    api_attempts: int = Field(5, ge=1, description="Tries per model call before api_error.")
    api_backoff_s: float = Field(1.0, ge=0, description="First retry pause; doubles each time.")
    budget: ModelBudget = Field(
        default_factory=ModelBudget,
        description="Tokens and dollars one trial's model calls may spend, kept by the proxy "
        "(or the terminal agent's client): past it, calls are refused.",
    )
    prices: PriceTable | None = Field(
        None, description="The price table a cost ceiling is kept with (the run's --prices)."
    )

    def api_key(self, default_env: str | None) -> SecretStr | None:
        if self.api_key_file is not None:
            try:
                return SecretStr(self.api_key_file.read_text().strip())
            except OSError as exc:
                raise RunConfigError(f"cannot read API key file {self.api_key_file}") from exc
        env = self.api_key_env or default_env
        value = os.environ.get(env) if env else None
        return SecretStr(value) if value else None


@dataclass(frozen=True, slots=True)
class DrawPoint:
    """Where in the design a trial sits: a population's draw depends on this and on the task
    only, never on the policy, so every policy meets the same behaviour on the same trial."""

    repeat: int = 1
    window: str = "default"


_AGENTS: Mapping[str, str] = {
    "oracle": "levelfield.agents.oracle",
    "nop": "levelfield.agents.nop",
    "replay": "levelfield.agents.replay",
    "population": "levelfield.agents.population",
    "terminal": "levelfield.agents.terminal",
    "command": "levelfield.agents.command",
    "claude-code": "levelfield.agents.command",  # the command agent's presets
    "codex": "levelfield.agents.command",
    "gemini-cli": "levelfield.agents.command",
}


def refuse_unrunnable(agent: str, tasks: Sequence[Task], load: Callable[[Task], object]) -> None:
    """An agent's `check(tasks)`: a per-task input it lacks (a solution, a trajectory) is bad
    input, so the run is refused before its first trial, naming every such task, rather than
    each trial being booked as the agent's failure. `load` raises AgentError for such a task."""
    problems = []
    for task in tasks:
        try:
            load(task)
        except AgentError as exc:
            problems.append(f"{task.name}: {exc}")
    if problems:
        raise RunConfigError(f"agent {agent}: " + "; ".join(problems))


def agent_kinds() -> Sequence[str]:
    return tuple(_AGENTS)


def agent_name(kind: str, options: AgentOptions) -> str:
    """The label a trial stores: the model is part of it, so two models never share a key. An
    unknown kind keeps its name here; `make_agent` refuses it."""
    if kind not in _AGENTS:
        return kind
    label = getattr(_agent_module(kind), "label", None)
    return label(kind, options) if label is not None else kind


def make_agent(
    spec: str, options: AgentOptions | None = None, *, repeat: int = 1, window: str = "default"
) -> Agent:
    """`repeat` and `window` place the trial in the design: only a population's draw reads them."""
    kind = spec.partition(":")[0]
    if kind not in _AGENTS:
        raise RunConfigError(
            f"unknown agent {spec!r}: use {', '.join(_AGENTS)} (replay needs replay:TRAJECTORY)"
        )
    create = _agent_module(kind).create
    return create(spec, options or AgentOptions(), DrawPoint(repeat, window))  # type: ignore[no-any-return]


def _agent_module(kind: str) -> ModuleType:
    return importlib.import_module(_AGENTS[kind])
