"""A minimal `command` agent, copied into a test task and run in the sandbox: it asks the OpenAI
Chat Completions endpoint in $OPENAI_BASE_URL (with the key in $OPENAI_API_KEY) for shell tool
calls, streamed, runs each one, and stops when the model answers in text. Standard library only,
so it runs on the host's userland; any failure of its model API (an error status, an error chunk,
a stream that ends before its [DONE]) ends it with exit code 1."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from typing import Any

BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
    },
}


def ask(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, str]]]:
    body = {"model": "scripted", "messages": messages, "tools": [BASH], "stream": True}
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",  # the proxy's
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    text, calls, done = "", {}, False
    with urllib.request.urlopen(request, timeout=600) as answer:
        for raw in answer:
            line = raw.decode().strip()
            done = done or line == "data: [DONE]"
            if not line.startswith("data:") or done:
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise RuntimeError(f"the model's stream failed: {event['error']}")
            for choice in event.get("choices") or []:
                delta = choice.get("delta") or {}
                text += delta.get("content") or ""
                for call in delta.get("tool_calls") or []:
                    part = calls.setdefault(call.get("index", 0), {"id": "", "args": ""})
                    part["id"] = call.get("id") or part["id"]
                    part["args"] += (call.get("function") or {}).get("arguments") or ""
    if not done:  # a stream broken off: what came may be half of the answer
        raise RuntimeError("the model's stream ended before [DONE]")
    return text, list(calls.values())


def _function(call: dict[str, str]) -> dict[str, str]:
    return {"name": "bash", "arguments": call["args"]}


def main() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": os.environ["LEVELFIELD_INSTRUCTION"]}
    ]
    for _ in range(20):
        text, calls = ask(messages)
        if not calls:
            print(f"agent: {text}")
            return
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": c["id"], "type": "function", "function": _function(c)} for c in calls
                ],
            }
        )
        for call in calls:
            command = json.loads(call["args"])["command"]
            done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
            print(f"agent ran: {command!r} -> {done.returncode}")
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": done.stdout + done.stderr}
            )


if __name__ == "__main__":
    main()
