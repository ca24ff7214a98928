"""A scripted model on loopback, for testing CLI agents and the proxy without a model API.

It answers the Anthropic Messages API, the OpenAI Chat Completions and Responses APIs and Google's
Gemini API (generateContent, streamGenerateContent), streaming (SSE) or not. Its agent turns are
tool calls that run a task's reference solution (`solution/solve.sh`), one shell command at a
time, then a final answer. It is stateless: the number of tool results already in the
conversation says which command comes next, so retries, resent histories and parallel side
requests cannot put it out of step. A request that offers no shell tool (a title, a summary, a
quota probe) gets a short answer in the protocol's own shape, and token counting has its own
endpoint. It can be told to fail the Nth call, or every call from the Nth on: with an HTTP status
(401, 429, 500, 529...) in the protocol's own error shape, by never answering (`hang`), by
resetting the connection mid-answer (`reset`), or with the protocol's error event inside a 200
stream (`stream-error`). The script is `_script.py`; each protocol's shapes are in its own module.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from levelfield.model_api import _scripted_anthropic as anthropic
from levelfield.model_api import _scripted_gemini as gemini
from levelfield.model_api import _scripted_openai as openai
from levelfield.model_api._http import Handler, LoopbackServer
from levelfield.model_api._script import (
    HANG_S,
    Failure,
    ScriptedModel,
    solution_commands,
    tokens,
)

__all__ = ["Failure", "ScriptedModel", "make_handler", "serve", "solution_commands"]
HANG_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class _Api:
    """One protocol's shapes: its answer, its stream, the stream broken by an error event, its
    error body. `streamed` reads from the path and body whether the client asked for a stream."""

    answer: Callable[[ScriptedModel, str, dict[str, Any]], dict[str, Any]]
    events: Callable[[dict[str, Any], str, dict[str, Any]], Iterator[bytes]]
    broken: Callable[[dict[str, Any]], Iterator[bytes]]
    error: Callable[[int, float], dict[str, Any]]
    streamed: Callable[[str, dict[str, Any]], bool] = lambda path, body: bool(body.get("stream"))


_ANTHROPIC = _Api(
    lambda model, path, body: anthropic.message(model, body),
    lambda answer, path, body: anthropic.events(answer),
    anthropic.broken_events,
    anthropic.error_body,
)
_CHAT = _Api(
    lambda model, path, body: openai.chat_completion(model, body),
    lambda answer, path, body: openai.chat_events(
        answer, bool((body.get("stream_options") or {}).get("include_usage"))
    ),
    openai.chat_broken_events,
    openai.error_body,
)
_RESPONSES = _Api(
    lambda model, path, body: openai.response_object(model, body),
    lambda answer, path, body: openai.response_events(answer),
    openai.response_broken_events,
    openai.error_body,
)
_GEMINI = _Api(
    gemini.content,
    lambda answer, path, body: gemini.events(answer),
    gemini.broken_events,
    gemini.error_body,
    lambda path, body: ":streamGenerateContent" in path,
)


def _api_of(path: str) -> _Api | None:
    if path.endswith("/messages"):
        return _ANTHROPIC
    if path.endswith("/chat/completions"):
        return _CHAT
    if path.endswith("/responses"):
        return _RESPONSES
    if path.endswith((":generateContent", ":streamGenerateContent")):
        return _GEMINI
    return None


def _error_shape(path: str) -> Callable[[int, float], dict[str, Any]]:
    if "/messages" in path:
        return anthropic.error_body
    if ":" in path.rsplit("/", 1)[-1]:
        return gemini.error_body
    return openai.error_body


def _request_key(handler: Handler) -> str:
    """The credential as each SDK sends it: a header of its own, a bearer token, `key=`."""
    for name in ("x-api-key", "api-key", "x-goog-api-key"):
        if handler.headers.get(name):
            return str(handler.headers[name])
    bearer = handler.headers.get("Authorization", "")
    if bearer:
        return bearer[7:] if bearer.lower().startswith("bearer ") else bearer
    keys = urllib.parse.parse_qs(urllib.parse.urlsplit(handler.path).query).get("key")
    return keys[0] if keys else ""


class _ScriptedHandler(Handler):
    """Answers one connection's requests from `model` (set on the subclass `make_handler`
    makes)."""

    model: ScriptedModel

    def do_GET(self) -> None:  # http.server's name for it
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/models"):
            entry = {
                "id": "scripted",
                "name": "models/scripted",
                "object": "model",
                "created": 0,
                "owned_by": "levelfield",
                "type": "model",
                "display_name": "scripted",
            }
            listing = {"object": "list", "data": [entry], "models": [entry], "has_more": False}
            self.send_json(200, listing)
        else:
            self.send_json(404, _error_shape(path)(404, 0.0))

    def do_HEAD(self) -> None:
        self.send_bytes(200, b"", "text/plain")

    def do_POST(self) -> None:
        path = self.path.split("?")[0]
        try:
            body = json.loads(self.read_body() or b"{}")
        except (ValueError, UnicodeDecodeError):
            self.send_json(400, _error_shape(path)(400, 0.0))
            return
        self.model.headers_seen.append({k.lower(): v for k, v in self.headers.items()})
        failure = self.model.next_call(path, body, _request_key(self))
        if failure is not None:
            self._fail(path, body, failure)
        elif path.endswith("/messages/count_tokens"):
            self.send_json(200, {"input_tokens": tokens(body)})
        elif path.endswith(":countTokens"):
            self.send_json(200, gemini.count(body))
        elif _api_of(path) is None:
            self.send_json(404, _error_shape(path)(404, 0.0))
        else:
            self._answer(path, body)

    def _answer(self, path: str, body: dict[str, Any]) -> None:
        api = _api_of(path)
        assert api is not None
        answer = api.answer(self.model, path, body)
        if not api.streamed(path, body):
            self.send_json(200, answer)
        elif api is _GEMINI and "alt=sse" not in self.path:
            self.send_json(200, [answer])  # Gemini's stream without SSE: one JSON array
        else:
            self._stream(api.events(answer, path, body))

    def _stream(self, events: Iterator[bytes]) -> None:
        self.start_stream(200, "text/event-stream")
        for chunk in events:
            self.write_chunk(chunk)
        self.end_stream()

    # -- failures ----------------------------------------------------------------------------

    def _fail(self, path: str, body: dict[str, Any], failure: Failure) -> None:
        api = _api_of(path)
        error = api.error if api is not None else _error_shape(path)
        streamed = api is not None and api.streamed(path, body)
        if failure.kind == "hang":
            self._hang()
        elif failure.kind == "reset" and api is not None:
            self._reset(api, path, body, streamed)
        elif failure.kind == "stream-error" and api is not None and streamed:
            self.start_stream(200, "text/event-stream")
            for chunk in api.broken(api.answer(self.model, path, body)):
                self.write_chunk(chunk)
            self.end_stream()
        else:
            status = failure.status or 500
            wait = self.model.retry_after_s
            headers = {"retry-after": f"{wait:g}"} if status == 429 else {}
            self.send_json(status, error(status, wait), headers)

    def _hang(self) -> None:
        """Answer nothing until the client goes away (or the server stops, or HANG_S)."""
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline and self.server.socket.fileno() != -1:
            readable, _, _ = select.select([self.connection], [], [], HANG_POLL_S)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                break
        self.close_connection = True

    def _reset(self, api: _Api, path: str, body: dict[str, Any], streamed: bool) -> None:
        """Start the answer, then reset the connection mid-way (a TCP RST), as when a load
        balancer or the provider's server drops it: no event of it arrives whole."""
        answer = api.answer(self.model, path, body)
        if streamed:  # the first event, cut in its middle
            first = next(iter(api.events(answer, path, body)))
            self.start_stream(200, "text/event-stream")
            self.write_chunk(first[: len(first) // 2])
        else:
            whole = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(whole)))
            self.end_headers()
            self.wfile.write(whole[: len(whole) // 2])
            self.wfile.flush()
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()
        self.close_connection = True


def make_handler(model: ScriptedModel) -> type[Handler]:
    return type("ScriptedHandler", (_ScriptedHandler,), {"model": model})


def serve(model: ScriptedModel, port: int = 0) -> LoopbackServer:
    """Start the scripted model on 127.0.0.1:`port` (0: any free port); `.stop()` ends it."""
    if port:
        sock = socket.create_server(("127.0.0.1", port))
        return LoopbackServer(make_handler(model), sock).start()
    return LoopbackServer(make_handler(model)).start()
