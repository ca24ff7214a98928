"""The scripted model's script: what it answers with (a task's reference solution, one shell
command a turn), what it was told to fail with, and what it saw. The protocol modules
(`_scripted_anthropic`, `_scripted_openai`, `_scripted_gemini`) put its turns in their shapes;
`scripted_model` serves them.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

# The shell tools of the CLIs we drive: Claude Code's Bash, Codex's shell / shell_command /
# exec_command (the name depends on the model family), and generic names.
SHELL_TOOLS = ("Bash", "shell_command", "shell", "exec_command", "bash", "run_shell_command")
FINAL_ANSWER = "Done: I ran the reference solution's commands."
SIDE_ANSWER = "Scripted answer."
COMMAND_TIMEOUT_MS = 600_000
FailureKind = Literal["status", "hang", "reset", "stream-error"]
HANG_S = 600.0  # a hung call answers nothing for this long, or until its client goes away


@dataclass(frozen=True, slots=True)
class Failure:
    """Fail call `first` (1-based, every POST counts), or every call from it on when
    `persistent`: with an HTTP `status`, or as `hang` (no answer at all), `reset` (the answer
    starts, then the connection is reset) or `stream-error` (a 200 stream that carries the
    protocol's own error event: Anthropic's `overloaded_error`, the Responses API's
    `response.failed`, an error chunk in Chat Completions and Gemini)."""

    status: int | None
    first: int
    persistent: bool = False
    kind: FailureKind = "status"

    @classmethod
    def parse(cls, text: str) -> Failure:
        """'429@3' fails call 3; '429@3+' fails call 3 and every later one; 'hang@2',
        'reset@1+', 'stream-error@1+' fail in those ways."""
        match = re.fullmatch(r"(\d{3}|hang|reset|stream-error)@(\d+)(\+?)", text.strip())
        if not match:
            raise ValueError(
                f"{text!r}: write STATUS@CALL or STATUS@CALL+ (e.g. 429@2+), with STATUS an "
                "HTTP status or one of hang, reset, stream-error"
            )
        what, first, persistent = match[1], int(match[2]), bool(match[3])
        if what.isdigit():
            return cls(int(what), first, persistent)
        return cls(None, first, persistent, what)  # type: ignore[arg-type]

    def applies(self, call: int) -> bool:
        return call == self.first or (self.persistent and call >= self.first)


def solution_commands(script: str) -> list[str]:
    """Split a shell script into its top-level commands: a command ends where the lines so far
    parse as complete shell (`bash -n`), so heredocs, if-blocks and continued lines stay whole.

    Each command runs in a fresh shell (as a CLI agent's shell tool runs it), so what only sets
    shell state (`set -e`, `cd DIR`, `NAME=value`, a function, `export`) is not sent alone: it
    leads every later command. Comments and blank lines are dropped."""
    commands: list[str] = []
    state: list[str] = []
    pending: list[str] = []
    for line in script.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending.append(line)
        chunk = "\n".join(pending)
        if not _is_complete(chunk):
            continue
        pending = []
        if _only_sets_state(chunk):
            state.append(chunk)
        else:
            commands.append("\n".join([*state, chunk]))
    if pending:
        commands.append("\n".join([*state, *pending]))
    return commands


_STATE = re.compile(
    r"\s*(set\s+[-+]\w+(\s+\w+)*"
    r"|cd\s+\S+"
    r"|(export\s+|declare\s+(-\w+\s+)?|readonly\s+)?[A-Za-z_]\w*="
    r"(\((.|\n)*\)|\"[^\"]*\"|'[^']*'|\$\([^()]*\)|[^\s;&|()]*)"
    r"|export\s+[A-Za-z_]\w*"
    r"|(function\s+)?[A-Za-z_][\w-]*\s*\(\)\s*\{(.|\n)*\})\s*"
)


def _only_sets_state(chunk: str) -> bool:
    return _STATE.fullmatch(chunk) is not None


def _is_complete(chunk: str) -> bool:
    if chunk.rstrip().endswith("\\"):
        return False
    done = subprocess.run(["bash", "-n"], input=chunk, text=True, capture_output=True)
    return done.returncode == 0 and "here-document" not in done.stderr


@dataclass
class ScriptedModel:
    """What the server answers with, and what it saw (for the tests' assertions)."""

    commands: list[str]
    by_instruction: dict[str, list[str]] = field(default_factory=dict)  # several tasks at once
    prelude: list[str] = field(default_factory=list)  # commands before every solution's
    failures: list[Failure] = field(default_factory=list)
    require_key: str | None = None  # answer 401 unless the request carries this key
    retry_after_s: float = 0.0  # told to a rate-limited client
    calls: int = 0
    keys_seen: list[str] = field(default_factory=list)
    requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    headers_seen: list[dict[str, str]] = field(default_factory=list)  # each POST's, lower-case
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=itertools.count)

    @classmethod
    def for_task(cls, task_dir: Path, **kwargs: Any) -> ScriptedModel:
        return cls(solution_commands((task_dir / "solution" / "solve.sh").read_text()), **kwargs)

    @classmethod
    def for_dataset(cls, dataset: Path, **kwargs: Any) -> ScriptedModel:
        """Every task of a dataset (or one task): a conversation gets the solution of the task
        whose instruction it holds, so one server drives trials of many tasks at once."""
        dirs = [dataset] if (dataset / "task.toml").is_file() else sorted(dataset.iterdir())
        solutions = {
            _instruction_key((d / "instruction.md").read_text()): solution_commands(
                (d / "solution" / "solve.sh").read_text()
            )
            for d in dirs
            if (d / "solution" / "solve.sh").is_file() and (d / "instruction.md").is_file()
        }
        if not solutions:
            raise ValueError(f"{dataset}: no task with instruction.md and solution/solve.sh")
        return cls([], by_instruction=solutions, **kwargs)

    def commands_for(self, body: dict[str, Any]) -> list[str]:
        if not self.by_instruction:
            return [*self.prelude, *self.commands]
        text = "\n".join(_strings(body))
        for key, commands in self.by_instruction.items():
            if key in text:
                return [*self.prelude, *commands]
        return []

    def next_call(self, path: str, body: dict[str, Any], key: str) -> Failure | None:
        """Count a call; return the failure it must get, if any."""
        with self._lock:
            self.calls += 1
            self.requests.append((path, body))
            self.keys_seen.append(key)
            number = self.calls
        if self.require_key is not None and key != self.require_key:
            return Failure(401, number)
        return next((f for f in self.failures if f.applies(number)), None)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def turn(
        self, body: dict[str, Any], tools: list[dict[str, Any]], done_steps: int
    ) -> tuple[str, Any] | None:
        """The next tool call as (tool name, arguments), or None for the final answer."""
        tool = shell_tool(tools)
        commands = self.commands_for(body) if tool is not None else []
        if tool is None or done_steps >= len(commands):
            return None
        name, schema = tool
        return name, arguments(schema, commands[done_steps])


def _instruction_key(instruction: str) -> str:
    """The instruction's first line of substance: enough to tell tasks apart, short enough to
    survive a CLI wrapping the instruction in its own text."""
    lines = [line.strip() for line in instruction.splitlines() if line.strip()]
    return lines[0][:120] if lines else instruction


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def shell_tool(tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The preferred shell tool the request offers, with its parameter schema: OpenAI's and
    Anthropic's tool lists, and Gemini's `functionDeclarations` inside each tool."""
    offered: dict[str, dict[str, Any]] = {}
    for tool in tools:
        declared = tool.get("functionDeclarations")
        for entry in declared if isinstance(declared, list) else [tool]:
            inner = entry.get("function") if isinstance(entry.get("function"), dict) else entry
            name = inner.get("name") or entry.get("type")
            schema = (
                inner.get("input_schema")
                or inner.get("parameters")
                or inner.get("parametersJsonSchema")
                or {}
            )
            if isinstance(name, str):
                offered[name] = schema if isinstance(schema, dict) else {}
    for name in SHELL_TOOLS:
        if name in offered:
            return name, offered[name]
    return None


def arguments(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """Fill the tool's own parameters: a string command, an argv, or `cmd`."""
    props = schema.get("properties") or {}
    args: dict[str, Any] = {}
    if "command" in props:
        is_argv = props["command"].get("type") == "array"
        args["command"] = ["bash", "-lc", command] if is_argv else command
    elif "cmd" in props:
        args["cmd"] = command
    else:
        args["command"] = command
    if "description" in props:
        args["description"] = "Run the next step of the solution"
    for name in ("timeout", "timeout_ms", "yield_time_ms"):  # wait for the command to end
        if name in props:
            args[name] = COMMAND_TIMEOUT_MS
    return args


def tokens(value: Any) -> int:
    """A deterministic stand-in for a tokenizer: about four characters a token."""
    return max(1, len(json.dumps(value)) // 4)


def value_for_schema(schema: Any) -> Any:
    """A value that fits a JSON schema, for side requests that ask for structured output (Gemini
    CLI's next-speaker and loop checks, its model router): the first of an enum, else the
    type's plainest value, every required property filled."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type", "object")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        wanted = schema.get("required") or list(props)
        return {name: value_for_schema(props.get(name)) for name in wanted}
    if kind in ("number", "integer"):
        return schema.get("minimum", 1)  # scores and counts start at 1 (Gemini CLI's router)
    return {"array": [], "string": "scripted", "boolean": False}.get(kind)
