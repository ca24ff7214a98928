"""A scripted model on loopback, for testing CLI agents and the proxy without a model API.

It answers the Anthropic Messages API and the OpenAI Chat Completions and Responses APIs,
streaming (SSE) or not. Its agent turns are tool calls that run a task's reference solution
(`solution/solve.sh`), one shell command at a time, then a final answer. It is stateless: the
number of tool results already in the conversation says which command comes next, so retries,
resent histories and parallel side requests cannot put it out of step. A request that offers no
shell tool (a title, a summary, a quota probe) gets a short answer in the protocol's own shape,
and token counting has its own endpoint. It can be told to answer 401, 429, 500 or 529 on the
Nth call, or from the Nth call on.
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
from typing import Any

from levelfield.model_api._http import Handler, LoopbackServer, sse_event

# The shell tools of the CLIs we drive: Claude Code's Bash, Codex's shell / shell_command /
# exec_command (the name depends on the model family), and generic names.
SHELL_TOOLS = ("Bash", "shell_command", "shell", "exec_command", "bash", "run_shell_command")
FINAL_ANSWER = "Done: I ran the reference solution's commands."
SIDE_ANSWER = "Scripted answer."
COMMAND_TIMEOUT_MS = 600_000
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True, slots=True)
class Failure:
    """Answer `status` on call `first` (1-based, every POST counts), or from it on when
    `persistent`."""

    status: int
    first: int
    persistent: bool = False

    @classmethod
    def parse(cls, text: str) -> Failure:
        """'429@3' fails call 3; '429@3+' fails call 3 and every later one."""
        match = re.fullmatch(r"(\d{3})@(\d+)(\+?)", text.strip())
        if not match:
            raise ValueError(f"{text!r}: write STATUS@CALL or STATUS@CALL+ (e.g. 429@2+)")
        return cls(int(match[1]), int(match[2]), bool(match[3]))

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

    def next_call(self, path: str, body: dict[str, Any], key: str) -> tuple[int, int | None]:
        """Count a call; return its number and the failure status it must get, if any."""
        with self._lock:
            self.calls += 1
            self.requests.append((path, body))
            self.keys_seen.append(key)
            number = self.calls
        if self.require_key is not None and key != self.require_key:
            return number, 401
        status = next((f.status for f in self.failures if f.applies(number)), None)
        return number, status

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    def turn(
        self, body: dict[str, Any], tools: list[dict[str, Any]], done_steps: int
    ) -> tuple[str, Any] | None:
        """The next tool call as (tool name, arguments), or None for the final answer."""
        tool = _shell_tool(tools)
        commands = self.commands_for(body) if tool is not None else []
        if tool is None or done_steps >= len(commands):
            return None
        name, schema = tool
        return name, _arguments(schema, commands[done_steps])


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


def _shell_tool(tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | None:
    """The preferred shell tool the request offers, with its parameter schema."""
    offered: dict[str, dict[str, Any]] = {}
    for tool in tools:
        inner = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = inner.get("name") or tool.get("type")
        schema = inner.get("input_schema") or inner.get("parameters") or {}
        if isinstance(name, str):
            offered[name] = schema if isinstance(schema, dict) else {}
    for name in SHELL_TOOLS:
        if name in offered:
            return name, offered[name]
    return None


def _arguments(schema: dict[str, Any], command: str) -> dict[str, Any]:
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


def _tokens(value: Any) -> int:
    """A deterministic stand-in for a tokenizer: about four characters a token."""
    return max(1, len(json.dumps(value)) // 4)


# -- Anthropic Messages ---------------------------------------------------------------------


def anthropic_message(model: ScriptedModel, body: dict[str, Any]) -> dict[str, Any]:
    done = sum(
        1
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )
    turn = model.turn(body, body.get("tools") or [], done)
    if turn is None:
        text = FINAL_ANSWER if _shell_tool(body.get("tools") or []) else SIDE_ANSWER
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop = "end_turn"
    else:
        content = [
            {"type": "tool_use", "id": model.new_id("toolu"), "name": turn[0], "input": turn[1]}
        ]
        stop = "tool_use"
    return {
        "id": model.new_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": _tokens(body), "output_tokens": _tokens(content)},
    }


def anthropic_events(message: dict[str, Any]) -> Iterator[bytes]:
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
    }
    yield sse_event({"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield sse_event(
            {"type": "content_block_start", "index": index, "content_block": opening},
            "content_block_start",
        )
        yield sse_event(
            {"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"
        )
        yield sse_event({"type": "content_block_stop", "index": index}, "content_block_stop")
    yield sse_event(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        "message_delta",
    )
    yield sse_event({"type": "message_stop"}, "message_stop")


# -- OpenAI Chat Completions ----------------------------------------------------------------


def chat_completion(model: ScriptedModel, body: dict[str, Any]) -> dict[str, Any]:
    done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    turn = model.turn(body, body.get("tools") or [], done)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if turn is None:
        message["content"] = FINAL_ANSWER if _shell_tool(body.get("tools") or []) else SIDE_ANSWER
        finish = "stop"
    else:
        message["tool_calls"] = [
            {
                "id": model.new_id("call"),
                "type": "function",
                "function": {"name": turn[0], "arguments": json.dumps(turn[1])},
            }
        ]
        finish = "tool_calls"
    tokens_in, tokens_out = _tokens(body), _tokens(message)
    return {
        "id": model.new_id("chatcmpl"),
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": tokens_in,
            "completion_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
        },
    }


def chat_events(completion: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    base = {k: completion[k] for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"
    choice = completion["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant"}
    if message.get("content"):
        delta["content"] = message["content"]
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    yield sse_event({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    yield sse_event(
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}]}
    )
    if include_usage:
        yield sse_event({**base, "choices": [], "usage": completion["usage"]})
    yield sse_event("[DONE]")


# -- OpenAI Responses -----------------------------------------------------------------------


def response_object(model: ScriptedModel, body: dict[str, Any]) -> dict[str, Any]:
    items = body.get("input") if isinstance(body.get("input"), list) else []
    done = sum(1 for item in items if str(item.get("type", "")).endswith("call_output"))
    tools = body.get("tools") or []
    turn = model.turn(body, tools, done)
    if turn is None:
        text = FINAL_ANSWER if _shell_tool(tools) else SIDE_ANSWER
        output: dict[str, Any] = {
            "type": "message",
            "id": model.new_id("msg"),
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
    else:
        output = {
            "type": "function_call",
            "id": model.new_id("fc"),
            "status": "completed",
            "call_id": model.new_id("call"),
            "name": turn[0],
            "arguments": json.dumps(turn[1]),
        }
    tokens_in, tokens_out = _tokens(body), _tokens(output)
    return {
        "id": model.new_id("resp"),
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": body.get("model", "scripted"),
        "output": [output],
        "usage": {
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "total_tokens": tokens_in + tokens_out,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def response_events(response: dict[str, Any]) -> Iterator[bytes]:
    seq = itertools.count()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event({"type": kind, "sequence_number": next(seq), **fields}, kind)

    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(response["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            opening = {**item, "status": "in_progress", "content": []}
            yield event("response.output_item.added", output_index=index, item=opening)
            part = {"type": "output_text", "text": "", "annotations": []}
            yield event("response.content_part.added", **where, content_index=0, part=part)
            yield event("response.output_text.delta", **where, content_index=0, delta=text)
            yield event("response.output_text.done", **where, content_index=0, text=text)
            done_part = {**part, "text": text}
            yield event("response.content_part.done", **where, content_index=0, part=done_part)
        else:
            opening = {**item, "status": "in_progress", "arguments": ""}
            yield event("response.output_item.added", output_index=index, item=opening)
            arguments = item["arguments"]
            yield event("response.function_call_arguments.delta", **where, delta=arguments)
            yield event("response.function_call_arguments.done", **where, arguments=arguments)
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=response)


# -- the server -----------------------------------------------------------------------------


def error_body(path: str, status: int) -> dict[str, Any]:
    kind = _ERROR_TYPES.get(status, "api_error")
    message = f"scripted {status} ({kind})"
    if "/messages" in path:
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"message": message, "type": kind, "code": kind}}


def _request_key(handler: Handler) -> str:
    key = handler.headers.get("x-api-key") or handler.headers.get("api-key") or ""
    bearer = handler.headers.get("Authorization", "")
    return key or (bearer[7:] if bearer.lower().startswith("bearer ") else bearer)


class _ScriptedHandler(Handler):
    """Answers one connection's requests from `model` (set on the subclass `make_handler`
    makes)."""

    model: ScriptedModel

    def do_GET(self) -> None:  # http.server's name for it
        if self.path.rstrip("/").endswith("/models"):
            entry = {
                "id": "scripted",
                "object": "model",
                "created": 0,
                "owned_by": "levelfield",
                "type": "model",
                "display_name": "scripted",
            }
            self.send_json(200, {"object": "list", "data": [entry], "has_more": False})
        else:
            self.send_json(404, error_body(self.path, 404))

    def do_HEAD(self) -> None:
        self.send_bytes(200, b"", "text/plain")

    def do_POST(self) -> None:
        try:
            body = json.loads(self.read_body() or b"{}")
        except (ValueError, UnicodeDecodeError):
            self.send_json(400, error_body(self.path, 400))
            return
        _, status = self.model.next_call(self.path, body, _request_key(self))
        if status is not None:
            headers = {"retry-after": f"{self.model.retry_after_s:g}"} if status == 429 else {}
            self.send_json(status, error_body(self.path, status), headers)
            return
        self._answer(self.path.split("?")[0], body)

    def _answer(self, path: str, body: dict[str, Any]) -> None:
        stream = bool(body.get("stream"))
        if path.endswith("/messages/count_tokens"):
            self.send_json(200, {"input_tokens": _tokens(body)})
        elif path.endswith("/messages"):
            message = anthropic_message(self.model, body)
            self._send(message, anthropic_events(message) if stream else None)
        elif path.endswith("/chat/completions"):
            completion = chat_completion(self.model, body)
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send(completion, chat_events(completion, usage) if stream else None)
        elif path.endswith("/responses"):
            response = response_object(self.model, body)
            self._send(response, response_events(response) if stream else None)
        else:
            self.send_json(404, error_body(path, 404))

    def _send(self, payload: dict[str, Any], events: Iterator[bytes] | None) -> None:
        if events is None:
            self.send_json(200, payload)
            return
        self.start_stream(200, "text/event-stream")
        for chunk in events:
            self.write_chunk(chunk)
        self.end_stream()


def make_handler(model: ScriptedModel) -> type[Handler]:
    return type("ScriptedHandler", (_ScriptedHandler,), {"model": model})


def serve(model: ScriptedModel, port: int = 0) -> LoopbackServer:
    """Start the scripted model on 127.0.0.1:`port` (0: any free port); `.stop()` ends it."""
    import socket

    if port:
        sock = socket.create_server(("127.0.0.1", port))
        return LoopbackServer(make_handler(model), sock).start()
    return LoopbackServer(make_handler(model)).start()
