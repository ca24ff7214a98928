"""Agents: what acts in the sandbox during the agent phase.

`oracle` runs the task's reference solution, `nop` does nothing (a task that passes with it is
broken), `replay` runs a recorded trajectory of commands with their timing, `command` installs and
runs any CLI agent inside the sandbox (presets `claude-code`, `codex`, `gemini-cli`), and
`terminal` is a compact built-in loop that asks a model for commands. An agent is named by a
string, as the store and the reports show it: "oracle", "replay:lean", "terminal:gpt-4.1",
"claude-code:claude-sonnet-4-5".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from levelfield.errors import RunConfigError
from levelfield.records import AgentReport, ApiCall, PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task

CLI_PRESETS = ("claude-code", "codex", "gemini-cli")  # agents/command.py's PRESETS


@dataclass(frozen=True, slots=True)
class AgentRun:
    """The agent phase as it happened: the phase result and the commands it executed."""

    phase: PhaseResult
    steps: tuple[dict[str, object], ...] = ()
    api_calls: tuple[ApiCall, ...] = field(default_factory=tuple)
    report: AgentReport | None = None  # what a CLI agent said about its own run


class Agent(Protocol):
    """What the runner calls. A CLI agent also has `mounts()` (host trees to bind read-only
    into the sandbox) and `setup(box, task, *, timeout_s, trial_dir) -> AgentSetup | None`,
    its install phase; the runner calls them where present."""

    name: str
    needs_network: bool

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun: ...


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
    api_key_env: str | None = Field(None, description="Environment variable holding the API key.")
    api_key_file: Path | None = Field(None, description="File holding the API key.")
    max_turns: int = Field(30, ge=1, description="Model calls the terminal agent may make.")
    api_attempts: int = Field(5, ge=1, description="Tries per model call before api_error.")
    api_backoff_s: float = Field(1.0, ge=0, description="First retry pause; doubles each time.")

    def api_key(self, default_env: str | None) -> SecretStr | None:
        if self.api_key_file is not None:
            try:
                return SecretStr(self.api_key_file.read_text().strip())
            except OSError as exc:
                raise RunConfigError(f"cannot read API key file {self.api_key_file}") from exc
        env = self.api_key_env or default_env
        value = os.environ.get(env) if env else None
        return SecretStr(value) if value else None


def agent_name(kind: str, options: AgentOptions) -> str:
    """The label a trial stores: the model is part of it, so two models never share a key."""
    if kind == "command":
        return f"command:{options.name or 'custom'}"
    if kind in ("terminal", *CLI_PRESETS) and options.model:
        return f"{kind}:{options.model}"
    return kind


def make_agent(spec: str, options: AgentOptions | None = None) -> Agent:
    options = options or AgentOptions()
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
    if kind in ("command", *CLI_PRESETS):
        from levelfield.agents.command import command_agent

        return command_agent(kind, spec, options)
    if kind == "terminal":
        from levelfield.agents.terminal import TerminalAgent

        return TerminalAgent(spec, options.model_copy(update={"model": options.model or arg}))
    raise RunConfigError(
        f"unknown agent {spec!r}: use oracle, nop, replay:TRAJECTORY, command, claude-code, "
        "codex, gemini-cli or terminal"
    )
