"""CLI agents installed and run inside the sandbox: `command`, and presets for Claude Code and
Codex.

The install step runs in the agent phase, under the trial's limits, and its time counts against
the agent timeout: on Terminal-Bench an agent's own install is what the 1x memory ceiling kills
first (`bn-fit-modify`), so excluding it would hide exactly the noise this harness measures.
Installs go to $HOME/.local (the host's /usr is read-only in the sandbox).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from levelfield.agents import AgentOptions, AgentRun, agent_name
from levelfield.errors import RunConfigError
from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task

INSTRUCTION_PATH = PurePosixPath("/logs/agent/instruction.md")
LOCAL_ENV = {
    "PATH": "/root/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "NPM_CONFIG_PREFIX": "/root/.local",
    "PIP_USER": "1",
}
_WITH_MODEL = '${LEVELFIELD_MODEL:+%s "$LEVELFIELD_MODEL"}'


@dataclass(frozen=True, slots=True)
class Preset:
    install: str
    command: str
    key_env: str
    state_dir: str  # the agent's own logs and session files under $HOME, kept with the trial


PRESETS = {
    "claude-code": Preset(
        install="npm install -g @anthropic-ai/claude-code",
        command="claude --print --dangerously-skip-permissions "
        + _WITH_MODEL % "--model"
        + ' "$LEVELFIELD_INSTRUCTION"',
        key_env="ANTHROPIC_API_KEY",
        state_dir=".claude",
    ),
    "codex": Preset(
        install="npm install -g @openai/codex",
        command="codex exec --full-auto --skip-git-repo-check "
        + _WITH_MODEL % "-m"
        + ' "$LEVELFIELD_INSTRUCTION"',
        key_env="OPENAI_API_KEY",
        state_dir=".codex",
    ),
}


def command_agent(kind: str, spec: str, options: AgentOptions) -> CommandAgent:
    preset = PRESETS.get(kind)
    command = options.command or (preset.command if preset else None)
    if not command:
        raise RunConfigError("the command agent needs --agent-cmd (and usually --agent-install)")
    return CommandAgent(
        name=spec if ":" in spec else agent_name(kind, options),
        install=options.install
        if options.install is not None
        else (preset.install if preset else None),
        command=command,
        key_env=options.api_key_env or (preset.key_env if preset else None),
        state_dir=preset.state_dir if preset else None,
        options=options,
    )


@dataclass(frozen=True)
class CommandAgent:
    name: str
    install: str | None
    command: str
    key_env: str | None
    state_dir: str | None
    options: AgentOptions
    needs_network: bool = True  # to reach its model's API and its package registry

    def environment(self, task: Task) -> dict[str, str]:
        env = {
            **LOCAL_ENV,
            "LEVELFIELD_INSTRUCTION": task.instruction,
            "LEVELFIELD_INSTRUCTION_FILE": str(INSTRUCTION_PATH),
            "IS_SANDBOX": "1",
        }
        if self.options.model:
            env["LEVELFIELD_MODEL"] = self.options.model
        if self.options.base_url:
            env["LEVELFIELD_BASE_URL"] = self.options.base_url
        key = self.options.api_key(self.key_env)
        if key is not None and self.key_env:
            env[self.key_env] = key.get_secret_value()
        return env

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        instruction = trial_dir / "instruction.md"
        instruction.write_text(task.instruction)
        box.copy_in(instruction, INSTRUCTION_PATH)
        env, deadline = self.environment(task), time.monotonic() + timeout_s
        steps: list[dict[str, object]] = []
        started = time.monotonic()
        for label, command in (("install", self.install), ("run", self.command)):
            if not command:
                continue
            budget = deadline - time.monotonic()
            phase = box.exec(
                command, timeout_s=max(budget, 0.001), env=env, log_path=trial_dir / "agent.log"
            )
            steps.append(
                {
                    "command": command,
                    "delay_s": 0.0,
                    "step": label,
                    "exit_code": phase.exit_code,
                    "duration_s": round(phase.duration_s, 3),
                }
            )
            if phase.timed_out or (label == "install" and phase.exit_code != 0):
                break
        self._keep_state(box, trial_dir, env)
        return AgentRun(_overall(phase, started), tuple(steps))

    def _keep_state(self, box: Sandbox, trial_dir: Path, env: dict[str, str]) -> None:
        if self.state_dir:
            box.exec(
                f"cp -r ~/{self.state_dir} /logs/agent/ 2>/dev/null || true",
                timeout_s=30,
                env=env,
                log_path=trial_dir / "agent.log",
            )


def _overall(last: PhaseResult, started: float) -> PhaseResult:
    return last.model_copy(update={"duration_s": time.monotonic() - started})
