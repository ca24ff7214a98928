"""What a CLI agent says about its own run, read from its machine-readable output: Claude Code's
`--output-format stream-json` lines, Codex's `exec --json` events, Gemini CLI's `--output-format
json` object. Besides status, turns and cost, each reader answers the question the outcome needs:
did the model's API fail? It applies the one rule every path shares (`outcome.is_api_failure`)
to the status the CLI names: 401, 403, 429, 5xx and no answer at all (a connection refused, a
stream broken off) are the API's failure, not the agent's; any other 4xx (a context too long)
is the agent's own. The commands the CLI ran become its trajectory, in the replay format.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from levelfield.model_api.conversation import StreamError
from levelfield.outcome import is_api_failure, outcome_for_status
from levelfield.records import AgentReport

MESSAGE_CHARS = 500
# Codex reports API failures only as text: "unexpected status 401 Unauthorized: ...", "exceeded
# retry limit, last status: 429 Too Many Requests", or the error body itself as JSON.
_CODEX_STATUS = re.compile(r"(?:unexpected status|last status:?)\s*(\d{3})\b", re.IGNORECASE)
# No status, and the API's: no answer, an answer broken off, its own overload words. Codex says
# "We're currently experiencing high demand" for 5xx past its retries.
_NO_ANSWER = re.compile(
    r"stream disconnected|Connection failed|error sending request|Transport error|timed? ?out"
    r"|\bterminated\b|fetch failed|ECONNRESET|ECONNREFUSED|ETIMEDOUT|socket hang up"
    r"|other side closed|incomplete json segment|high demand",
    re.IGNORECASE,
)
_RATE_WORDS = re.compile(r"rate.?limit|quota exceeded|too many requests", re.IGNORECASE)


def api_failed(status: int | None, text: str) -> bool:
    """The shared rule on what a CLI said: its status when it names one, else its words."""
    if status is not None:
        return is_api_failure(status, outcome_for_status(status, text))
    if _RATE_WORDS.search(text) or "overloaded" in text.lower():
        return True
    return bool(_NO_ANSWER.search(text))


def _status_in(text: str) -> int | None:
    """The HTTP status a CLI's error text names: Codex's phrasing, or an error body's own."""
    found = _CODEX_STATUS.search(text)
    if found:
        return int(found[1])
    start = text.find("{")
    if start < 0:
        return None
    try:
        body = json.loads(text[start:])
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    return StreamError.of(error).status if isinstance(error, dict) else None


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
    status = result.get("api_error_status")
    status = status if isinstance(status, int) else None
    said_api = status is not None or result.get("terminal_reason") == "api_error"
    api_failure = bool(result.get("is_error")) and said_api
    api_failure = api_failure and api_failed(status, str(result.get("result") or ""))
    word = result.get("subtype")
    if word and result.get("is_error"):
        word = f"{word} (is_error)"
    return Reading(
        AgentReport(
            exit_code=exit_code,
            status=word,
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
    said = str(message or "")
    api_failure = status == "turn.failed" and api_failed(_status_in(said), said)
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
    said = str(error.get("message") or "")
    # Its HTTP status when it names one; past its retries a broken connection ends with a
    # code of its own (1, "terminated"): read the words then, as for every CLI.
    status = code if isinstance(code, int) and 100 <= code < 600 else _status_in(said)
    api_failure = bool(error) and api_failed(status, said)
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
