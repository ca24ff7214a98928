"""Reading model API answers as the proxy relays them: server-sent events, token usage, the first
token, and the tool calls a model made, for the Anthropic Messages API, the OpenAI Chat
Completions and Responses APIs and Google's Gemini API (generateContent, streamGenerateContent).

Each answer is read once, as it streams by; nothing here touches the network. A stream is whole
only when its protocol's last event came (`finished`), and an error it carries after its 200
(`error`: Anthropic's `error` event, the Responses API's `response.failed`, an `error` object in
a chat or Gemini chunk) is read with the HTTP status it stands for, so that the proxy records the
call as what it was. The tool calls of a conversation become the trial's trajectory in the replay
format, so a CLI agent's run under one policy can be replayed under every other.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

SHELL_TOOLS = frozenset(
    {"Bash", "bash", "shell", "shell_command", "exec_command", "local_shell", "run_shell_command"}
)
# The HTTP status an error inside a 200 stream stands for. Anthropic's error types
# (docs.anthropic.com "Errors"), OpenAI's codes, Google's canonical status names (google.rpc.Code).
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
    "context_length_exceeded": 400,
    "invalid_prompt": 400,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "server_is_overloaded": 529,
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
UNKNOWN_ERROR_STATUS = 500  # an answer that failed for a reason it does not name: the API's


@dataclass(frozen=True, slots=True)
class StreamError:
    """An error an answer carried after its 200: the status it stands for, and what it said."""

    status: int
    message: str

    @classmethod
    def of(cls, error: Any) -> StreamError:
        if not isinstance(error, dict):
            return cls(UNKNOWN_ERROR_STATUS, str(error)[:300])
        code = error.get("code")
        named = error.get("type") or error.get("status") or code
        if isinstance(code, int) and 400 <= code < 600:
            status = code
        else:
            status = _ERROR_STATUS.get(str(named), _ERROR_STATUS.get(str(code), 0))
        said = f"{named}: {error.get('message', '')}" if named else str(error.get("message"))
        return cls(status or UNKNOWN_ERROR_STATUS, said[:300])


@dataclass(frozen=True, slots=True)
class ToolCall:
    call_id: str
    name: str
    arguments: Any  # parsed JSON where it parses, else the raw text

    def command(self) -> str | None:
        """The shell command of a shell tool call; None for any other tool."""
        if self.name not in SHELL_TOOLS or not isinstance(self.arguments, dict):
            return None
        value = self.arguments.get("command", self.arguments.get("cmd"))
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            if len(value) == 3 and value[1] in ("-c", "-lc") and value[0].endswith("sh"):
                return value[2]
            return shlex.join(value)
        return value if isinstance(value, str) else None


@dataclass
class AnswerReader:
    """Fed the body of one answer (whole or as SSE chunks); knows its usage and tool calls."""

    streamed: bool
    tokens_in: int | None = None
    tokens_out: int | None = None
    first_token: bool = False  # set when the first content arrives
    events: list[Any] = field(default_factory=list)
    known: bool = False  # an event of a protocol read here came: its end can be judged
    finished: bool = False  # the protocol's last event came (a stream is whole)
    error: StreamError | None = None
    _buffer: bytes = b""
    _parts: dict[Any, dict[str, Any]] = field(default_factory=dict)  # tool calls being streamed
    calls: list[ToolCall] = field(default_factory=list)

    def feed(self, chunk: bytes) -> bool:
        """Take a chunk of an event stream; True once content has started to arrive."""
        self._buffer += chunk
        while b"\n\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n\n", 1)
            self._event(raw)
        return self.first_token

    def finish(self, body: bytes = b"") -> None:
        if self.streamed:
            if self._buffer.strip():
                self._event(self._buffer)
            self._buffer = b""
            self._close_streamed_calls()
            return
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return
        for item in doc if isinstance(doc, list) else [doc]:  # Gemini streams without SSE: a list
            if isinstance(item, dict):
                self.events.append(item)
                self._whole(item)

    # -- events ----------------------------------------------------------------------------

    def _event(self, raw: bytes) -> None:
        data = "\n".join(
            line[5:].lstrip()
            for line in raw.decode(errors="replace").splitlines()
            if line.startswith("data:")
        )
        if data == "[DONE]":  # Chat Completions' last event
            self.known = self.finished = True
            return
        if not data:
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        self.events.append(event)
        kind = str(event.get("type", ""))
        if "delta" in kind or _chat_delta_has_content(event):
            self.first_token = True
        if kind.startswith("message_") or kind.startswith("content_block_"):
            self._anthropic_event(kind, event)
        elif kind.startswith("response."):
            self._responses_event(kind, event)
        elif kind == "error" or (not kind and "error" in event):
            self.known = True  # Anthropic's, the Responses API's, a chat or Gemini chunk's
            said = event.get("error", {k: event.get(k) for k in ("code", "message")})
            self.error = StreamError.of(said)
        elif "candidates" in event or "usageMetadata" in event:
            self._gemini(event)
        elif "choices" in event or "usage" in event:
            self._chat_chunk(event)

    def _anthropic_event(self, kind: str, event: dict[str, Any]) -> None:
        self.known = True
        self.finished |= kind == "message_stop"
        if kind == "message_start":
            self._usage((event.get("message") or {}).get("usage"))
        elif kind == "message_delta":
            usage = event.get("usage") or {}
            if usage.get("output_tokens") is not None:
                self.tokens_out = int(usage["output_tokens"])
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                self._parts[event.get("index")] = {
                    "id": block.get("id", ""),
                    "name": block.get("name", ""),
                    "args": "",
                }
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            part = self._parts.get(event.get("index"))
            if part is not None and delta.get("type") == "input_json_delta":
                part["args"] += delta.get("partial_json", "")

    def _responses_event(self, kind: str, event: dict[str, Any]) -> None:
        self.known = True
        response = event.get("response") or {}
        if kind == "response.output_item.done":
            self._responses_item(event.get("item") or {})
        elif kind in ("response.completed", "response.incomplete"):
            self.finished = True
            self._usage(response.get("usage"))
        elif kind == "response.failed":
            self.finished = True
            self.error = StreamError.of(response.get("error") or {"message": "response.failed"})
            self._usage(response.get("usage"))

    def _chat_chunk(self, event: dict[str, Any]) -> None:
        self.known = True
        self._usage(event.get("usage"))
        for choice in event.get("choices") or []:
            for call in (choice.get("delta") or {}).get("tool_calls") or []:
                part = self._parts.setdefault(
                    call.get("index", 0), {"id": "", "name": "", "args": ""}
                )
                function = call.get("function") or {}
                part["id"] = call.get("id") or part["id"]
                part["name"] = function.get("name") or part["name"]
                part["args"] += function.get("arguments") or ""

    def _close_streamed_calls(self) -> None:
        for part in self._parts.values():
            self.calls.append(ToolCall(part["id"], part["name"], _parsed(part["args"] or "{}")))
        self._parts.clear()

    # -- whole answers ---------------------------------------------------------------------

    def _gemini(self, event: dict[str, Any]) -> None:
        """One GenerateContentResponse (a whole answer or one chunk of a stream): usage is the
        running total so far, and a candidate's finishReason ends the answer."""
        self.known = True
        usage = event.get("usageMetadata")
        if isinstance(usage, dict):
            if usage.get("promptTokenCount") is not None:
                self.tokens_in = int(usage["promptTokenCount"])
            out = int(usage.get("candidatesTokenCount") or 0)
            self.tokens_out = out + int(usage.get("thoughtsTokenCount") or 0)
        for candidate in event.get("candidates") or []:
            self.finished |= bool(candidate.get("finishReason"))
            for part in (candidate.get("content") or {}).get("parts") or []:
                if part.get("text") or part.get("functionCall"):
                    self.first_token = True
                call = part.get("functionCall")
                if isinstance(call, dict):
                    args = call.get("args") or {}
                    self.calls.append(ToolCall(call.get("id") or "", call.get("name", ""), args))

    def _whole(self, doc: dict[str, Any]) -> None:
        self.first_token = True
        if "candidates" in doc or "usageMetadata" in doc:  # Gemini
            self._gemini(doc)
            return
        self._usage(doc.get("usage"))
        for block in doc.get("content") or []:  # Anthropic
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self.calls.append(
                    ToolCall(block.get("id", ""), block.get("name", ""), block.get("input"))
                )
        for choice in doc.get("choices") or []:  # Chat Completions
            for call in (choice.get("message") or {}).get("tool_calls") or []:
                function = call.get("function") or {}
                self.calls.append(
                    ToolCall(
                        call.get("id", ""),
                        function.get("name", ""),
                        _parsed(function.get("arguments") or "{}"),
                    )
                )
        for item in doc.get("output") or []:  # Responses
            if isinstance(item, dict):
                self._responses_item(item)

    def _responses_item(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "function_call":
            self.calls.append(
                ToolCall(
                    item.get("call_id", ""),
                    item.get("name", ""),
                    _parsed(item.get("arguments") or "{}"),
                )
            )
        elif kind == "local_shell_call":
            action = item.get("action") or {}
            self.calls.append(
                ToolCall(item.get("call_id", ""), "local_shell", {"command": action.get("command")})
            )

    def _usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        tokens_in = usage.get("input_tokens", usage.get("prompt_tokens"))
        tokens_out = usage.get("output_tokens", usage.get("completion_tokens"))
        cached = sum(
            int(usage.get(k) or 0)
            for k in ("cache_read_input_tokens", "cache_creation_input_tokens")
        )
        if tokens_in is not None:
            self.tokens_in = int(tokens_in) + cached
        if tokens_out is not None:
            self.tokens_out = int(tokens_out)


def _chat_delta_has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("tool_calls"):
            return True
    return False


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def trajectory_steps(calls: list[tuple[ToolCall, float]]) -> list[dict[str, object]]:
    """Shell tool calls in the replay format: the model's latency before each one is its
    `delay_s`. Other tools (file edits, searches) cannot be replayed as commands; they are
    counted in a step's `skipped_tools` so the gap is visible."""
    steps: list[dict[str, object]] = []
    seen: set[str] = set()
    skipped: list[str] = []
    for call, delay_s in calls:
        if call.call_id and call.call_id in seen:
            continue
        seen.add(call.call_id)
        command = call.command()
        if command is None:
            skipped.append(call.name)
            continue
        step: dict[str, object] = {
            "command": command,
            "delay_s": round(delay_s, 3),
            "tool": call.name,
        }
        if skipped:
            step["skipped_tools"], skipped = skipped, []
        steps.append(step)
    return steps
