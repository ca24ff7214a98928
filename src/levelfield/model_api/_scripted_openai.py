"""The scripted model's answers in OpenAI's shapes: Chat Completions (a completion, its chunks)
and Responses (a response, its events), with their error bodies and the streams that break off
with an error (an `error` chunk; `response.failed`)."""

from __future__ import annotations

import itertools
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

ERROR_CODES = {
    400: "invalid_request_error",
    401: "invalid_api_key",
    403: "permission_denied",
    429: "rate_limit_exceeded",
    500: "server_error",
    529: "server_is_overloaded",
}

# -- Chat Completions -----------------------------------------------------------------------


def chat_completion(model: ScriptedModel, body: dict[str, Any]) -> dict[str, Any]:
    done = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    step = model.turn(body, body.get("tools") or [], done)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if step is None:
        message["content"] = FINAL_ANSWER if shell_tool(body.get("tools") or []) else SIDE_ANSWER
        finish = "stop"
    else:
        message["tool_calls"] = [
            {
                "id": model.new_id("call"),
                "type": "function",
                "function": {"name": step[0], "arguments": json.dumps(step[1])},
            }
        ]
        finish = "tool_calls"
    tokens_in, tokens_out = tokens(body), tokens(message)
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


def _chunk_base(completion: dict[str, Any]) -> dict[str, Any]:
    base = {k: completion[k] for k in ("id", "created", "model")}
    return {**base, "object": "chat.completion.chunk"}


def chat_events(completion: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    base = _chunk_base(completion)
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


def chat_broken_events(completion: dict[str, Any]) -> Iterator[bytes]:
    """The first chunk, then an error object in place of the rest (as vLLM and OpenAI send)."""
    base = _chunk_base(completion)
    yield sse_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})
    yield sse_event(error_body(529))


# -- Responses ------------------------------------------------------------------------------


def response_object(model: ScriptedModel, body: dict[str, Any]) -> dict[str, Any]:
    items = body.get("input") if isinstance(body.get("input"), list) else []
    done = sum(1 for item in items if str(item.get("type", "")).endswith("call_output"))
    tools = body.get("tools") or []
    step = model.turn(body, tools, done)
    if step is None:
        text = FINAL_ANSWER if shell_tool(tools) else SIDE_ANSWER
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
            "name": step[0],
            "arguments": json.dumps(step[1]),
        }
    tokens_in, tokens_out = tokens(body), tokens(output)
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


def _numbered() -> Any:
    seq = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event({"type": kind, "sequence_number": next(seq), **fields}, kind)

    return event


def response_events(response: dict[str, Any]) -> Iterator[bytes]:
    event = _numbered()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
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


def response_broken_events(response: dict[str, Any]) -> Iterator[bytes]:
    """Created, then failed: the Responses API's way of saying the model could not answer."""
    event = _numbered()
    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=pending)
    failed = {**pending, "status": "failed", "error": error_body(500)["error"]}
    yield event("response.failed", response=failed)


def error_body(status: int, retry_after_s: float = 0.0) -> dict[str, Any]:
    code = ERROR_CODES.get(status, "server_error")
    return {"error": {"message": f"scripted {status} ({code})", "type": code, "code": code}}
