"""The scripted model's answers in the Anthropic Messages API's shapes: a message, its
server-sent events, an error body, and a stream that breaks off with an `error` event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from levelfield.model_api._http import sse_event
from levelfield.model_api._script import (
    FINAL_ANSWER,
    SIDE_ANSWER,
    ScriptedModel,
    shell_tool,
    tokens,
)

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def message(model: ScriptedModel, body: dict[str, Any]) -> dict[str, Any]:
    done = sum(
        1
        for turn in body.get("messages", [])
        if isinstance(turn.get("content"), list)
        for block in turn["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )
    step = model.turn(body, body.get("tools") or [], done)
    if step is None:
        text = FINAL_ANSWER if shell_tool(body.get("tools") or []) else SIDE_ANSWER
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        stop = "end_turn"
    else:
        content = [
            {"type": "tool_use", "id": model.new_id("toolu"), "name": step[0], "input": step[1]}
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
        "usage": {"input_tokens": tokens(body), "output_tokens": tokens(content)},
    }


def _start(answer: dict[str, Any]) -> bytes:
    usage = answer["usage"]
    start = {
        **answer,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
    }
    return sse_event({"type": "message_start", "message": start}, "message_start")


def events(answer: dict[str, Any]) -> Iterator[bytes]:
    yield _start(answer)
    for index, block in enumerate(answer["content"]):
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
            "delta": {"stop_reason": answer["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": answer["usage"]["output_tokens"]},
        },
        "message_delta",
    )
    yield sse_event({"type": "message_stop"}, "message_stop")


def error_body(status: int, retry_after_s: float = 0.0) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": f"scripted {status} ({kind})"}}


def broken_events(answer: dict[str, Any]) -> Iterator[bytes]:
    """The stream starts, then the API overloads mid-way, as Anthropic's streams can."""
    yield _start(answer)
    yield sse_event(error_body(529), "error")
