"""The built-in `terminal` agent: a compact loop that shows a model the instruction and each
command's output, and runs the commands it answers with, until it says it is done or the agent
timeout or the turn budget ends.

The loop runs in the harness; only the commands run in the sandbox, under the trial's limits. The
model answers with one JSON object: {"commands": ["..."], "done": false}. Every executed command
is kept with its timing (model latency as `delay_s`), in the replay agent's format, so the same
trajectory can be replayed under every other policy without sampling the model again.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from levelfield.agents import AgentOptions, AgentRun, DrawPoint, agent_name
from levelfield.agents._llm import ChatClient, RetryPolicy, Stopped, guess_provider
from levelfield.errors import ApiError, RunConfigError
from levelfield.model_api.budget import Meter
from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox
from levelfield.tasks import Task

COMMAND_TIMEOUT_S = 120.0
OUTPUT_CHARS = 4000  # of each command's output shown back to the model
SYSTEM = """You operate a Linux shell to complete a task. Answer every message with exactly one
JSON object and nothing else: {"commands": ["<shell command>", ...], "done": <true|false>}.
Commands run one after another with bash in the task's working directory; you then see their
exit codes and output. Set "done" to true, with no commands, when the task is complete."""
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Answer:
    commands: tuple[str, ...]
    done: bool
    valid: bool


def parse_answer(text: str) -> Answer:
    """Lenient: the first {...} in the text; anything unreadable asks the model again."""
    match = _JSON_OBJECT.search(text)
    try:
        data = json.loads(match.group(0)) if match else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("commands", []), list):
        return Answer((), False, False)
    commands = tuple(str(c) for c in data.get("commands", []) if str(c).strip())
    return Answer(commands, bool(data.get("done", False)), True)


class TerminalAgent:
    needs_network = False  # the model is called from the harness, not from the sandbox

    def __init__(self, spec: str, options: AgentOptions) -> None:
        if not options.model:
            raise RunConfigError("the terminal agent needs --model (e.g. terminal --model gpt-4.1)")
        self.options = options
        self.name = spec if ":" in spec else agent_name("terminal", options)

    def client(self) -> ChatClient:
        provider, model = guess_provider(
            self.options.model or "", self.options.base_url, self.options.provider
        )
        default_env = "ANTHROPIC_API_KEY" if provider == "anthropic" else "OPENAI_API_KEY"
        retry = RetryPolicy(self.options.api_attempts, self.options.api_backoff_s)
        key = self.options.api_key(default_env)
        meter = Meter(self.options.budget, self.options.prices, model)
        return ChatClient(provider, model, key, self.options.base_url, retry, meter)

    def run(self, box: Sandbox, task: Task, *, timeout_s: float, trial_dir: Path) -> AgentRun:
        client, started = self.client(), time.monotonic()
        deadline = started + timeout_s
        messages = [{"role": "user", "content": task.instruction}]
        steps: list[dict[str, object]] = []
        last = PhaseResult(exit_code=0)
        try:
            for _ in range(self.options.max_turns):
                asked = time.monotonic()
                reply = client.complete(SYSTEM, messages, deadline=deadline)
                if isinstance(reply, Stopped):  # its own doing: graded as it stands
                    last = _stopped_phase(reply)
                    break
                messages.append({"role": "assistant", "content": reply.text})
                answer = parse_answer(reply.text)
                observation, last = self._execute(box, answer, steps, asked, deadline, trial_dir)
                if (answer.done and not answer.commands) or time.monotonic() >= deadline:
                    break
                messages.append({"role": "user", "content": observation})
        except ApiError as exc:
            raise ApiError(str(exc), tuple(client.calls)) from None
        timed_out = time.monotonic() >= deadline or last.timed_out
        phase = last.model_copy(
            update={"duration_s": time.monotonic() - started, "timed_out": timed_out}
        )
        return AgentRun(phase, tuple(steps), tuple(client.calls))

    def _execute(
        self,
        box: Sandbox,
        answer: Answer,
        steps: list[dict[str, object]],
        asked: float,
        deadline: float,
        trial_dir: Path,
    ) -> tuple[str, PhaseResult]:
        if not answer.valid:
            return 'Answer with one JSON object: {"commands": [...], "done": false}.', PhaseResult(
                exit_code=0
            )
        parts, last = [], PhaseResult(exit_code=0)
        for command in answer.commands:
            budget = min(COMMAND_TIMEOUT_S, deadline - time.monotonic())
            if budget <= 0:
                break
            delay = round(time.monotonic() - asked, 3) if not parts else 0.0
            last = box.exec(command, timeout_s=budget, log_path=trial_dir / "agent.log")
            steps.append(
                {
                    "command": command,
                    "delay_s": delay,
                    "exit_code": last.exit_code,
                    "duration_s": round(last.duration_s, 3),
                }
            )
            status = "timed out" if last.timed_out else f"exit code {last.exit_code}"
            parts.append(f"$ {command}\n[{status}]\n{last.output_tail[-OUTPUT_CHARS:]}")
        return "\n\n".join(parts) or "No commands were run.", last


def _stopped_phase(stopped: Stopped) -> PhaseResult:
    if stopped.deadline:
        return PhaseResult(exit_code=None, timed_out=True, output_tail=stopped.why)
    return PhaseResult(exit_code=1, output_tail=stopped.why)


def create(spec: str, options: AgentOptions, at: DrawPoint) -> TerminalAgent:
    model = options.model or spec.partition(":")[2]
    return TerminalAgent(spec, options.model_copy(update={"model": model}))


def label(kind: str, options: AgentOptions) -> str:
    return f"{kind}:{options.model}" if options.model else kind
