"""The recording proxy: every model call a CLI agent makes goes through levelfield.

A CLI agent (Claude Code, Codex) reaches its model API through this proxy, named by its base-URL
variables (ANTHROPIC_BASE_URL; a provider of its own for Codex). The proxy runs in the
harness, on the host, and its listening socket is made inside the sandbox's own network
namespace, on the sandbox's loopback: a sandbox without network reaches the proxy and nothing
else, and one with network gets no extra route to the host. The sandbox holds only a per-trial
dummy token; the proxy checks it and puts the user's real key on the upstream request, so model-
driven code never holds the key.

Each call is recorded as the `terminal` agent records its own (`records.ApiCall`): UTC start,
latency, time to first token, tokens, status, attempt and rate-limit answers. The conversation
(requests and answers, keys masked) is appended to the trial's `conversation.jsonl` as it happens,
so a trial that dies still leaves it. The CLI's own retries are its retry policy: the proxy never
retries, it counts a resent identical request as the next attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import http.client
import json
import os
import secrets
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from levelfield.errors import SandboxStartError
from levelfield.model_api._http import Handler, LoopbackServer
from levelfield.model_api.conversation import AnswerReader, ToolCall, trajectory_steps
from levelfield.records import ApiCall

CLONE_NEWNET = 0x40000000  # <sched.h>
SETTLE_TIMEOUT_S = 30.0  # a relayed call still being written down when the agent ends
UPSTREAM_TIMEOUT_S = 600.0  # one socket read: a long model answer streams within it
CHUNK_BYTES = 64 << 10
MASK = "***"
SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization", "x-goog-api-key"}
)
HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "host",
        "content-length",
        "accept-encoding",
        "proxy-connection",
    }
)
Provider = Literal["anthropic", "openai"]
OFFICIAL_BASE_URL: dict[Provider, str] = {
    "anthropic": "https://api.anthropic.com",  # the SDK appends /v1/messages
    "openai": "https://api.openai.com/v1",  # the SDKs append /responses, /chat/completions
}


@dataclass(frozen=True, slots=True)
class Route:
    """One API the sandbox reaches at http://127.0.0.1:PORT/<provider>, relayed to `upstream`."""

    provider: Provider
    upstream: str
    key: SecretStr | None = None  # None: the upstream needs no key (a local server)

    @property
    def prefix(self) -> str:
        return f"/{self.provider}"


def new_token() -> str:
    """The dummy token a sandbox gets in place of the key: worthless outside this trial."""
    return f"levelfield-trial-{secrets.token_hex(16)}"


def socket_in_namespace(netns: Path | None) -> socket.socket:
    """A listening socket on 127.0.0.1 inside the network namespace at `netns` (None: the
    host's). setns(2) switches only the calling thread, so a short-lived thread makes the socket;
    the socket stays in that namespace after the thread is gone."""
    if netns is None:
        return socket.create_server(("127.0.0.1", 0))
    made: dict[str, Any] = {}

    def make() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        try:
            fd = os.open(netns, os.O_RDONLY)
        except OSError as exc:
            made["error"] = exc
            return
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                made["error"] = OSError(errno, f"setns({netns}): {os.strerror(errno)}")
                return
            made["sock"] = socket.create_server(("127.0.0.1", 0))
        except OSError as exc:
            made["error"] = exc
        finally:
            os.close(fd)

    thread = threading.Thread(target=make, name="proxy-netns")
    thread.start()
    thread.join()
    if "sock" not in made:
        raise SandboxStartError(f"the model proxy cannot listen in the sandbox: {made['error']}")
    return made["sock"]  # type: ignore[no-any-return]


@dataclass
class _Exchange:
    """One relayed call while it happens."""

    route: Route
    method: str
    path: str
    body: bytes
    started: datetime
    t0: float
    attempt: int = 1
    status: int | None = None
    first_token_s: float | None = None
    reader: AnswerReader = field(default_factory=lambda: AnswerReader(streamed=False))
    retry_after_s: float | None = None
    error: str | None = None


class ModelProxy:
    """The proxy of one trial: its routes, its token, what it recorded."""

    def __init__(self, routes: list[Route], *, conversation: Path | None = None) -> None:
        self.routes = {route.prefix: route for route in routes}
        self.token = new_token()
        self.conversation = conversation
        self._calls: list[ApiCall] = []
        self._in_flight = 0
        self._settled = threading.Condition()
        self.refused = 0  # requests without the trial's token: never relayed
        self._tool_calls: list[tuple[ToolCall, float]] = []
        self._secrets = [r.key.get_secret_value() for r in routes if r.key is not None]
        self._lock = threading.Lock()
        self._servers: list[LoopbackServer] = []
        self._last: tuple[str, int, bool] | None = None  # body hash, attempt, ok

    @property
    def calls(self) -> list[ApiCall]:
        """Every call so far, once those in flight are recorded: a CLI may exit the moment its
        last answer arrives, before the relaying thread has written it down."""
        with self._settled:
            self._settled.wait_for(lambda: self._in_flight == 0, timeout=SETTLE_TIMEOUT_S)
        with self._lock:
            return list(self._calls)

    def note_refused(self) -> None:
        with self._lock:
            self.refused += 1

    def begin(self) -> None:
        with self._settled:
            self._in_flight += 1

    def end(self) -> None:
        with self._settled:
            self._in_flight -= 1
            self._settled.notify_all()

    def listen(self, netns: Path | None = None) -> int:
        """Serve on 127.0.0.1 in the sandbox's network namespace; returns the port there."""
        server = LoopbackServer(_handler(self), socket_in_namespace(netns)).start()
        self._servers.append(server)
        return server.port

    def base_urls(self, port: int) -> dict[Provider, str]:
        return {
            route.provider: f"http://127.0.0.1:{port}{prefix}"
            for prefix, route in self.routes.items()
        }

    def close(self) -> None:
        for server in self._servers:
            server.stop()
        self._servers.clear()

    def __enter__(self) -> ModelProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def trajectory(self) -> list[dict[str, object]]:
        with self._lock:
            return trajectory_steps(list(self._tool_calls))

    # -- relaying --------------------------------------------------------------------------

    def route_for(self, path: str) -> tuple[Route, str] | None:
        for prefix, route in self.routes.items():
            if path == prefix or path.startswith(prefix + "/"):
                return route, path[len(prefix) :]
        return None

    def is_trial_token(self, headers: Any) -> bool:
        given = headers.get("x-api-key") or headers.get("api-key") or ""
        bearer = headers.get("Authorization") or ""
        if bearer.lower().startswith("bearer "):
            given = given or bearer[7:].strip()
        return secrets.compare_digest(given.encode(), self.token.encode())

    def attempt_of(self, body: bytes) -> int:
        """A request identical to a failed one just before it is that request's retry."""
        digest = _digest(body)
        with self._lock:
            if self._last is not None and self._last[0] == digest and not self._last[2]:
                return self._last[1] + 1
        return 1

    def remember(self, ex: _Exchange) -> None:
        """Before the answer reaches the CLI, which may resend at once."""
        ok = ex.status is not None and 200 <= ex.status < 300
        with self._lock:
            self._last = (_digest(ex.body), ex.attempt, ok)

    def record(self, ex: _Exchange) -> ApiCall:
        latency = time.monotonic() - ex.t0
        call = ApiCall(
            started_at=ex.started.isoformat(timespec="milliseconds"),
            latency_s=round(latency, 4),
            attempt=ex.attempt,
            status=ex.status,
            outcome=outcome_of_status(ex.status, ex.reader.events),  # type: ignore[arg-type]
            tokens_in=ex.reader.tokens_in,
            tokens_out=ex.reader.tokens_out,
            endpoint=ex.path.split("?")[0],
            first_token_s=round(ex.first_token_s if ex.first_token_s is not None else latency, 4)
            if ex.status is not None and 200 <= ex.status < 300
            else None,
            streamed=ex.reader.streamed,
            retry_after_s=ex.retry_after_s,
        )
        with self._lock:
            self._calls.append(call)
            self._tool_calls += [(c, latency) for c in ex.reader.calls]
        self._write_conversation(ex, call)
        return call

    def _write_conversation(self, ex: _Exchange, call: ApiCall) -> None:
        if self.conversation is None:
            return
        entry = {
            "call": call.model_dump(),
            "method": ex.method,
            "path": ex.path,
            "request": _json_or_text(ex.body),
            "answer": ex.reader.events if ex.reader.events else None,
            "error": ex.error,
        }
        text = json.dumps(entry)
        for secret in (*self._secrets, self.token):
            if secret:
                text = text.replace(secret, MASK)
        with self._lock, open(self.conversation, "a") as out:
            out.write(text + "\n")


def outcome_of_status(status: int | None, events: list[Any]) -> str:
    """The same words the terminal agent's client uses (`agents/_llm.classify_api_error`)."""
    if status is None:
        return "connection_error"
    if 200 <= status < 300:
        overloaded = any(
            isinstance(e, dict)
            and e.get("type") == "error"
            and "overloaded" in json.dumps(e.get("error"))
            for e in events
        )
        return "overloaded" if overloaded else "ok"  # Anthropic streams can fail mid-way
    if status == 429:
        return "rate_limited"
    if status == 529 or any("overloaded" in json.dumps(e) for e in events):
        return "overloaded"
    return "server_error" if status >= 500 else "client_error"


def _digest(body: bytes) -> str:
    """Of the JSON's content: a client may serialise the same request with its keys in another
    order on each try (Codex does)."""
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        body = json.dumps(json.loads(body), sort_keys=True).encode()
    return hashlib.sha256(body).hexdigest()


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return body.decode(errors="replace")[:2000]


def _retry_after(headers: http.client.HTTPMessage) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            with contextlib.suppress(ValueError):
                return float(value) / scale
    return None


class _ProxyHandler(Handler):
    """Relays one connection's requests for `proxy` (set on the subclass `_handler` makes)."""

    proxy: ModelProxy

    def do_POST(self) -> None:  # http.server's names for them
        self._relay()

    def do_GET(self) -> None:
        self._relay()

    def do_DELETE(self) -> None:
        self._relay()

    def _relay(self) -> None:
        found = self.proxy.route_for(self.path)
        if found is None:
            self.send_json(404, {"error": {"message": "unknown API path at the proxy"}})
            return
        if self.headers.get("Upgrade"):  # a WebSocket transport: the CLI falls back to HTTP
            self.send_json(426, {"error": {"message": "the proxy relays HTTP only"}})
            return
        if not self.proxy.is_trial_token(self.headers):
            self.proxy.note_refused()
            self.send_json(401, {"error": {"message": "not this trial's token"}})
            return
        route, rest = found
        self.proxy.begin()
        try:
            self._exchange(route, rest)
        finally:
            self.proxy.end()

    def _exchange(self, route: Route, rest: str) -> None:
        body = self.read_body()
        ex = _Exchange(route, self.command, rest, body, datetime.now(UTC), time.monotonic())
        ex.attempt = self.proxy.attempt_of(body)
        try:
            self._forward(ex)
        except (OSError, http.client.HTTPException) as exc:
            ex.error = f"{type(exc).__name__}: {exc}"
            if ex.status is None:
                self.proxy.remember(ex)
                with contextlib.suppress(OSError):
                    self.send_json(502, {"error": {"message": "upstream unreachable"}})
        finally:
            self.proxy.record(ex)

    def _forward(self, ex: _Exchange) -> None:
        url = urllib.parse.urlsplit(ex.route.upstream.rstrip("/") + ex.path)
        conn_type = (
            http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_type(url.netloc, timeout=UPSTREAM_TIMEOUT_S)
        target = url.path + (f"?{url.query}" if url.query else "")
        try:
            conn.request(
                ex.method, target, body=ex.body or None, headers=self._upstream_headers(ex)
            )
            answer = conn.getresponse()
            ex.status = answer.status
            self.proxy.remember(ex)
            ex.retry_after_s = _retry_after(answer.msg)
            streamed = "text/event-stream" in (answer.getheader("Content-Type") or "")
            ex.reader = AnswerReader(streamed=streamed)
            if streamed:
                self._stream(ex, answer)
            else:
                data = answer.read()
                ex.reader.finish(data)
                self.send_bytes(
                    answer.status,
                    data,
                    answer.getheader("Content-Type") or "application/json",
                    _passed_headers(answer),
                )
        finally:
            conn.close()

    def _stream(self, ex: _Exchange, answer: http.client.HTTPResponse) -> None:
        self.start_stream(
            answer.status, answer.getheader("Content-Type") or "", _passed_headers(answer)
        )
        while chunk := answer.read1(CHUNK_BYTES):
            if ex.reader.feed(chunk) and ex.first_token_s is None:
                ex.first_token_s = time.monotonic() - ex.t0
            self.write_chunk(chunk)
        ex.reader.finish()
        self.end_stream()

    def _upstream_headers(self, ex: _Exchange) -> dict[str, str]:
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in HOP_HEADERS and k.lower() not in SECRET_HEADERS
        }
        headers["Accept-Encoding"] = "identity"  # the proxy reads usage from the answer
        key = ex.route.key.get_secret_value() if ex.route.key is not None else None
        if key and ex.route.provider == "anthropic" and self.headers.get("x-api-key"):
            headers["x-api-key"] = key
        elif key:
            headers["Authorization"] = f"Bearer {key}"
        return headers


def _handler(proxy: ModelProxy) -> type[Handler]:
    return type("ProxyHandler", (_ProxyHandler,), {"proxy": proxy})


def _passed_headers(answer: http.client.HTTPResponse) -> dict[str, str]:
    """Rate-limit and request-id headers reach the CLI, which reads them for its own retries."""
    keep = ("retry-after", "retry-after-ms", "request-id", "x-request-id")
    return {
        k: v
        for k, v in answer.getheaders()
        if k.lower() in keep or "ratelimit" in k.lower() or k.lower() == "x-should-retry"
    }
