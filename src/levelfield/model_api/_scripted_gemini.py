"""The scripted model's answers in the shapes of Google's Gemini API (`generateContent`,
`streamGenerateContent` with `alt=sse` or as a JSON array, `countTokens`): a
GenerateContentResponse, its stream, Google's error body, and a stream that breaks off with an
error chunk.

A side request that asks for structured output (Gemini CLI's next-speaker and loop checks, its
model router) gets JSON that fits the schema it sent, as a real model's would. A 429 says "Please
retry in Ns", as Google's do, which Gemini CLI reads as its retry delay.
"""

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
    value_for_schema,
)

STATUS_NAMES = {  # google.rpc.Code, as the API names them in its error bodies
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    529: "UNAVAILABLE",
}


def model_of(path: str) -> str:
    """`/v1beta/models/gemini-2.5-pro:generateContent` → gemini-2.5-pro."""
    name = path.split("?")[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0] or "scripted"


def content(model: ScriptedModel, path: str, body: dict[str, Any]) -> dict[str, Any]:
    turns = body.get("contents") or []
    done = sum(
        1
        for turn in turns
        if isinstance(turn, dict)
        for part in turn.get("parts") or []
        if isinstance(part, dict) and "functionResponse" in part
    )
    tools = body.get("tools") or []
    step = model.turn(body, tools, done)
    if step is not None:
        parts: list[dict[str, Any]] = [{"functionCall": {"name": step[0], "args": step[1]}}]
    else:
        parts = [{"text": _text(body, shell_tool(tools) is not None)}]
    tokens_in, tokens_out = tokens(body), tokens(parts)
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": tokens_in,
            "candidatesTokenCount": tokens_out,
            "totalTokenCount": tokens_in + tokens_out,
        },
        "modelVersion": model_of(path),
        "responseId": model.new_id("resp"),
    }


def _text(body: dict[str, Any], offered_shell: bool) -> str:
    config = body.get("generationConfig") or body.get("config") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if config.get("responseMimeType") == "application/json" and schema:
        return json.dumps(value_for_schema(schema))
    return FINAL_ANSWER if offered_shell else SIDE_ANSWER


def events(answer: dict[str, Any]) -> Iterator[bytes]:
    yield sse_event(answer)


def broken_events(answer: dict[str, Any]) -> Iterator[bytes]:
    """A chunk without its finish, then an error chunk in place of the rest."""
    candidate = {**answer["candidates"][0]}
    candidate.pop("finishReason")
    yield sse_event({**answer, "candidates": [candidate]})
    yield sse_event(error_body(503))


def error_body(status: int, retry_after_s: float = 0.0) -> dict[str, Any]:
    name = STATUS_NAMES.get(status, "INTERNAL")
    message = f"scripted {status} ({name})"
    if status == 429:
        message += f". Please retry in {retry_after_s:g}s."
    return {"error": {"code": status, "message": message, "status": name}}


def count(body: dict[str, Any]) -> dict[str, Any]:
    return {"totalTokens": tokens(body)}
