"""A scripted OpenAI-compatible server on loopback: it answers /v1/chat/completions with the
replies a test queues (and 429/500 responses, to exercise the retry policy), and records the
Authorization header it saw. Bounded: it serves only what was queued, then 500s."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Script:
    responses: list[tuple[int, str]] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)  # type: ignore[type-arg]

    def reply(self, content: str) -> Script:
        self.responses.append((200, content))
        return self

    def fail(self, status: int, times: int = 1) -> Script:
        self.responses += [(status, "")] * times
        return self

    def commands(self, *commands: str, done: bool = False) -> Script:
        return self.reply(json.dumps({"commands": list(commands), "done": done}))


def _completion(content: str) -> bytes:
    return json.dumps(
        {
            "id": "cmpl-1",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content},
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }
    ).encode()


@contextmanager
def model_server(script: Script) -> Iterator[str]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # http.server's name for it
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                script.authorizations.append(self.headers.get("Authorization", ""))
                script.requests.append(json.loads(body or b"{}"))
                status, content = script.responses.pop(0) if script.responses else (500, "")
            payload = (
                _completion(content)
                if status == 200
                else json.dumps(
                    {"error": {"message": f"scripted {status}", "type": "scripted"}}
                ).encode()
            )
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


# A 401 body every CLI reads as an authentication failure: Anthropic's error shape, with the
# `code` and `status` fields that Google's and OpenAI's clients look for.
UNAUTHORIZED = json.dumps(
    {
        "type": "error",
        "error": {
            "type": "authentication_error",
            "message": "invalid x-api-key",
            "code": 401,
            "status": "UNAUTHENTICATED",
        },
    }
).encode()
CLONE_NEWNET = 0x40000000


@dataclass
class Seen:
    """What an endpoint was asked: paths, and the credentials that came with them."""

    paths: list[str] = field(default_factory=list)
    credentials: list[str] = field(default_factory=list)


@contextmanager
def unauthorized_server(port: int = 0, netns_pid: int | None = None) -> Iterator[tuple[str, Seen]]:
    """Answers 401 to everything, on loopback. With `netns_pid`, on the loopback of that
    process's network namespace (a container's): the socket is created there, served from here."""
    seen, lock = Seen(), threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
            with lock:
                seen.paths.append(self.path)
                seen.credentials += [
                    self.headers.get(h, "")
                    for h in ("Authorization", "x-api-key", "x-goog-api-key")
                    if self.headers.get(h)
                ]
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(UNAUTHORIZED)))
            self.end_headers()
            self.wfile.write(UNAUTHORIZED)

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a CLI dropping a connection it gave up on (Codex's WebSocket tries)

    with _in_netns(netns_pid):
        server = Server(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def _in_netns(pid: int | None) -> Iterator[None]:
    """setns(2) for this thread only; a socket keeps the namespace it was created in."""
    if pid is None:
        yield
        return
    import ctypes
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into the network namespace of {pid}")
        try:
            yield
        finally:
            libc.setns(own, CLONE_NEWNET)
    finally:
        os.close(own)
        os.close(target)
