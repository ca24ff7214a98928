"""A plain HTTP listener standing in for a provider: it writes down every request that reaches it
(method, request-target, headers, body), whatever its method or path, and answers each. Model
calls it hands to the scripted model behind it and relays the answer; anything else gets a 200
that says it leaked, so an attempt the proxy should have refused would look like a success to
the agent, and shows in `seen`."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pydantic import SecretStr

from levelfield.model_api.proxy import Route

MODEL_SUFFIXES = (
    "/messages",
    "/messages/count_tokens",
    "/chat/completions",
    "/responses",
    ":generateContent",
    ":streamGenerateContent",
    ":countTokens",
)


@dataclass(frozen=True)
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes

    def credential(self) -> str:
        """The key as the proxy put it: a header of its own, a bearer token, or `key=`."""
        for name in ("x-api-key", "x-goog-api-key", "api-key"):
            if name in self.headers:
                return self.headers[name]
        bearer = self.headers.get("authorization", "")
        if bearer:
            return bearer.removeprefix("Bearer ")
        return self.target.partition("key=")[2].partition("&")[0]


@dataclass
class Witness:
    model_port: int
    seen: list[Seen] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # model calls it could not hand on, and why
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(witness: Witness) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def __getattr__(self, name: str) -> Any:
            if name.startswith("do_"):  # every method, so nothing reaches it unseen
                return self._answer
            raise AttributeError(name)

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            with witness.lock:
                witness.seen.append(Seen(self.command, self.path, headers, body))
            path = self.path.partition("?")[0]
            if self.command == "POST" and path.endswith(MODEL_SUFFIXES):
                try:
                    status, content_type, answer = _ask_model(witness.model_port, self, body)
                except (OSError, http.client.HTTPException) as exc:  # said, not a bare hang-up
                    with witness.lock:
                        witness.errors.append(f"{self.command} {self.path}: {exc!r}")
                    status, content_type = 502, "application/json"
                    answer = json.dumps({"witness": repr(exc)}).encode()
            else:
                status, content_type = 200, "application/json"
                answer = json.dumps({"leaked": self.command + " " + self.path}).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _ask_model(port: int, request: BaseHTTPRequestHandler, body: bytes) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        passed = {k: v for k, v in request.headers.items() if k.lower() not in ("host",)}
        conn.request(request.command, request.path, body=body, headers=passed)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type") or "", answer.read()
    finally:
        conn.close()


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # as the scripted model's: calls made at once all get in


@contextmanager
def witness_upstream(model_port: int) -> Iterator[tuple[str, Witness]]:
    """The witness on host loopback in front of the scripted model at `model_port`; yields its
    base URL and what it saw."""
    witness = Witness(model_port)
    server = _Server(("127.0.0.1", 0), _handler(witness))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", witness
    finally:
        server.shutdown()
        server.server_close()


def routes_to(upstream: str, key: str) -> list[Route]:
    """The three providers' routes to the witness, each with the real key."""
    return [
        Route("anthropic", upstream, SecretStr(key)),
        Route("openai", upstream + "/v1", SecretStr(key)),
        Route("gemini", upstream, SecretStr(key)),
    ]
