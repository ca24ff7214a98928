"""What a CLI agent says about its own run, read from its machine-readable output: Claude Code's
`--output-format stream-json` lines, Codex's `exec --json` events, Gemini CLI's `--output-format
json` object. Besides status, turns and cost, each reader answers the question the outcome needs:
did the model's API fail (401, 429, 5xx, no connection)? Such a run is the infrastructure's
failure, not the agent's. The commands the CLI ran become its trajectory, in the replay format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from levelfield.records import AgentReport

MESSAGE_CHARS = 500
# Codex reports API failures only as text: "unexpected status 401 Unauthorized: ...".
_API_TEXT = re.compile(
    r"unexpected status (4\d\d|5\d\d)|stream disconnected|Connection failed|error sending request"
    r"|rate.?limit|quota exceeded|overloaded",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Reading:
    report: AgentReport
    commands: tuple[dict[str, object], ...] = ()


def _json_lines(text: str) -> Iterator[dict[str, Any]]:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                yield value


def _short(text: object) -> str | None:
    return str(text)[:MESSAGE_CHARS] if text not in (None, "") else None


def read_claude_code(text: str, exit_code: int | None) -> Reading:
    """The `result` line ends a stream-json run; tool_use blocks named Bash are its commands."""
    result: dict[str, Any] = {}
    commands: list[dict[str, object]] = []
    for event in _json_lines(text):
        if event.get("type") == "result":
            result = event
        elif event.get("type") == "assistant":
            for block in (event.get("message") or {}).get("content") or []:
                if block.get("type") == "tool_use" and block.get("name") == "Bash":
                    command = (block.get("input") or {}).get("command")
                    if command:
                        commands.append({"command": command, "delay_s": 0.0})
    api_failure = bool(result.get("is_error")) and (
        result.get("api_error_status") is not None or result.get("terminal_reason") == "api_error"
    )
    status = result.get("subtype")
    if status and result.get("is_error"):
        status = f"{status} (is_error)"
    return Reading(
        AgentReport(
            exit_code=exit_code,
            status=status,
            turns=result.get("num_turns"),
            cost_usd=result.get("total_cost_usd"),
            api_failure=api_failure,
            message=_short(result.get("result")),
        ),
        tuple(commands),
    )


def read_codex(text: str, exit_code: int | None) -> Reading:
    """turn.completed / turn.failed close each turn; command_execution items are its commands."""
    status, message, turns = None, None, 0
    commands: list[dict[str, object]] = []
    for event in _json_lines(text):
        kind = event.get("type")
        if kind in ("turn.completed", "turn.failed"):
            status, turns = kind, turns + 1
            if kind == "turn.failed":
                message = (event.get("error") or {}).get("message")
        elif kind == "error" and message is None:
            message = event.get("message")
        elif kind == "item.completed":
            item = event.get("item") or {}
            if item.get("type") == "command_execution" and item.get("command"):
                commands.append(
                    {"command": item["command"], "delay_s": 0.0, "exit_code": item.get("exit_code")}
                )
    api_failure = status == "turn.failed" and bool(message and _API_TEXT.search(str(message)))
    return Reading(
        AgentReport(
            exit_code=exit_code,
            status=status,
            turns=turns or None,
            api_failure=api_failure,
            message=_short(message),
        ),
        tuple(commands),
    )


def read_gemini_cli(text: str, exit_code: int | None) -> Reading:
    """One JSON object ({"response", "stats", "error"}), pretty-printed at the end of the run."""
    data = _last_object(text)
    error = data.get("error") or {}
    code = error.get("code")
    api_failure = isinstance(code, int) and 400 <= code < 600
    retrying = None if data else _gemini_last_retry(text)
    if retrying is not None:  # it never answered: it was still retrying its API when it ended
        api_failure, error = True, {"message": retrying}
    tools = ((data.get("stats") or {}).get("tools") or {}).get("totalCalls")
    return Reading(
        AgentReport(
            exit_code=exit_code,
            status=("error" if error else "success") if data else None,
            turns=tools if isinstance(tools, int) else None,
            api_failure=api_failure,
            message=_short(error.get("message") or data.get("response")),
        )
    )


# Gemini CLI's own retry loop: "Attempt 3 failed. Retrying with backoff... Error: exception
# TypeError: fetch failed sending request", each followed by a stack trace.
_GEMINI_RETRY = re.compile(r"^Attempt \d+ failed\b.*$")
_NOISE = re.compile(r"^\s+at |^\[STARTUP\]|^\s*$")


def _gemini_last_retry(text: str) -> str | None:
    """The retry line that ends the output, when nothing but its stack trace follows it: a
    CLI killed (or timed out) in that state was waiting on its model API, not working."""
    for line in reversed(text.splitlines()):
        if _GEMINI_RETRY.match(line):
            return line.strip()
        if not _NOISE.match(line):
            return None
    return None


def _last_object(text: str) -> dict[str, Any]:
    """The last top-level JSON object in mixed output: from the last line that is just '{'."""
    lines = text.splitlines()
    for start in range(len(lines) - 1, -1, -1):
        if lines[start].strip() == "{":
            try:
                value = json.loads("\n".join(lines[start:]))
            except json.JSONDecodeError:
                continue
            return value if isinstance(value, dict) else {}
    return {}


READERS: dict[str, Callable[[str, int | None], Reading]] = {
    "claude-code": read_claude_code,
    "codex": read_codex,
    "gemini-cli": read_gemini_cli,
}
