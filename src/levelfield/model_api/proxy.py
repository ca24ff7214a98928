"""The recording proxy: every model call an agent in a sandbox makes goes through levelfield.

Every agent given a key (Claude Code, Codex, Gemini CLI, a `command` agent) reaches its model API
through this proxy, named by its base-URL variables (ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
GOOGLE_GEMINI_BASE_URL; a provider of its own for Codex). The proxy runs in the harness, on the
host, and its listening socket is made inside the sandbox's own network namespace, on the
sandbox's loopback: a sandbox without network reaches the proxy and nothing else, and one with
network gets no extra route to the host. The sandbox holds only a per-trial dummy token; the proxy
checks it and puts the user's real key where the client had put the token (`providers.py`), so
model-driven code never holds the key.

This module routes and relays; `_recording.py` keeps what each call was (`records.ApiCall`, the
trajectory, the conversation, keys masked, appended as it happens so a trial that dies still
leaves it). The CLI's own retries are its retry policy: the proxy never retries, it counts a
resent identical request as the next attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import os
import secrets
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from levelfield.errors import SandboxStartError
from levelfield.masking import Masker
from levelfield.model_api._http import Handler, LoopbackServer
from levelfield.model_api._recording import CallLog, Exchange
from levelfield.model_api.conversation import AnswerReader
from levelfield.model_api.providers import OFFICIAL_BASE_URL, Credentials, Provider, with_key
from levelfield.records import ApiCall

__all__ = ["OFFICIAL_BASE_URL", "ModelProxy", "Provider", "Route", "new_token"]

CLONE_NEWNET = 0x40000000  # <sched.h>
UPSTREAM_TIMEOUT_S = 600.0  # one socket read: a long model answer streams within it
CHUNK_BYTES = 64 << 10
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


class ModelProxy:
    """The proxy of one trial: its routes, its token, what it recorded. `secrets` is the trial's
    masker: the token and the keys join it, so the sandbox's logs mask them too."""

    def __init__(
        self,
        routes: list[Route],
        *,
        conversation: Path | None = None,
        secrets: Masker | None = None,
    ) -> None:
        self.routes = {route.prefix: route for route in routes}
        self.token = new_token()
        masker = secrets if secrets is not None else Masker()
        masker.add(self.token, *(r.key.get_secret_value() for r in routes if r.key is not None))
        self.log = CallLog(masker, conversation)
        self.refused = 0  # requests without the trial's token: never relayed
        self._lock = threading.Lock()
        self._servers: list[LoopbackServer] = []

    @property
    def calls(self) -> list[ApiCall]:
        """Every call, each as what it was; read once the agent has ended (`CallLog.settle`)."""
        return self.log.settle()

    def trajectory(self) -> list[dict[str, object]]:
        return self.log.trajectory()

    def note_refused(self) -> None:
        with self._lock:
            self.refused += 1

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

    def route_for(self, path: str) -> tuple[Route, str] | None:
        for prefix, route in self.routes.items():
            if path == prefix or path.startswith(prefix + "/"):
                return route, path[len(prefix) :]
        return None

    def is_trial_token(self, given: Credentials) -> bool:
        """Every credential the request carries must be the token, and it must carry one."""
        values = given.values()
        return bool(values) and all(
            secrets.compare_digest(v.encode(), self.token.encode()) for v in values
        )


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
        found = self.proxy.route_for(self.path.split("?")[0])
        if found is None:
            self.send_json(404, {"error": {"message": "unknown API path at the proxy"}})
            return
        if self.headers.get("Upgrade"):  # a WebSocket transport: the CLI falls back to HTTP
            self.send_json(426, {"error": {"message": "the proxy relays HTTP only"}})
            return
        given = Credentials.of(self.headers, urllib.parse.urlsplit(self.path).query)
        if not self.proxy.is_trial_token(given):
            self.proxy.note_refused()
            self.send_json(401, {"error": {"message": "not this trial's token", "code": 401}})
            return
        route, _ = found
        ex = Exchange(
            route.provider,
            self.command,
            self.path[len(route.prefix) :],
            self.read_body(),
            datetime.now(UTC),
            time.monotonic(),
            client=self.connection,
        )
        log = self.proxy.log
        ex.attempt = log.attempt_of(ex.body)
        log.begin(ex)
        try:
            self._forward(ex, route, given)
        except (OSError, http.client.HTTPException) as exc:
            ex.error = f"{type(exc).__name__}: {exc}"
            if not ex.begun:  # no answer, or one broken before any of it went on: a 502
                log.remember(ex, ok=False)
                if not self._to_agent(ex, lambda: self._bad_gateway(ex)):
                    self.close_connection = True
        finally:
            log.end(ex)

    def _bad_gateway(self, ex: Exchange) -> None:
        said = "upstream unreachable" if ex.status is None else "the upstream's answer broke off"
        self.send_json(502, {"error": {"message": said, "code": 502}})

    def _to_agent(self, ex: Exchange, send: Any) -> bool:
        """Send to the agent; False (and the call cut short) when its connection is gone."""
        try:
            send()
            return True
        except OSError:
            ex.cut_short = ex.cut_short or "the agent closed its connection before the answer ended"
            self.close_connection = True
            return False

    def _forward(self, ex: Exchange, route: Route, given: Credentials) -> None:
        url = urllib.parse.urlsplit(route.upstream.rstrip("/") + ex.path)
        key = route.key.get_secret_value() if route.key is not None else None
        headers, query = with_key(self._relayed_headers(), url.query, given, key)
        conn_type = (
            http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        )
        conn = conn_type(url.netloc, timeout=UPSTREAM_TIMEOUT_S)
        target = url.path + (f"?{query}" if query else "")
        try:
            conn.request(ex.method, target, body=ex.body or None, headers=headers)
            answer = conn.getresponse()
            ex.status = answer.status
            self.proxy.log.remember(ex, ok=200 <= answer.status < 300)
            ex.retry_after_s = _retry_after(answer.msg)
            streamed = "text/event-stream" in (answer.getheader("Content-Type") or "")
            ex.reader = AnswerReader(streamed=streamed)
            if streamed:
                self._stream(ex, answer)
            else:
                data = answer.read()
                ex.reader.finish(data)
                ex.complete = True
                content_type = answer.getheader("Content-Type") or "application/json"
                send = lambda: self.send_bytes(  # noqa: E731
                    answer.status, data, content_type, _passed_headers(answer)
                )
                ex.begun = True
                ex.answered = self._to_agent(ex, send)
        finally:
            conn.close()

    def _stream(self, ex: Exchange, answer: http.client.HTTPResponse) -> None:
        """Relay the events as they come. A read that fails upstream ends the stream to the agent
        as broken (no final chunk), so the agent sees what the proxy saw."""
        start = lambda: self.start_stream(  # noqa: E731
            answer.status, answer.getheader("Content-Type") or "", _passed_headers(answer)
        )
        ex.begun = True
        if not self._to_agent(ex, start):
            return
        while True:
            try:
                chunk = answer.read1(CHUNK_BYTES)
            except (OSError, http.client.HTTPException) as exc:
                ex.error = f"{type(exc).__name__}: {exc}"
                ex.reader.finish()
                self.proxy.log.remember(ex, ok=False)  # before the agent sees it break
                self.close_connection = True
                return
            if not chunk:
                break
            if ex.reader.feed(chunk) and ex.first_token_s is None:
                ex.first_token_s = time.monotonic() - ex.t0
            if ex.reader.error is not None:  # an error event: the agent may retry at once
                self.proxy.log.remember(ex, ok=False)
            if not self._to_agent(ex, lambda c=chunk: self.write_chunk(c)):  # type: ignore[misc]
                ex.reader.finish()
                return
        ex.reader.finish()
        self.proxy.log.remember(ex, ok=ex.outcome()[0] == "ok")  # a stream ended short, too
        ex.complete = True
        ex.answered = self._to_agent(ex, self.end_stream)

    def _relayed_headers(self) -> dict[str, str]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        headers["Accept-Encoding"] = "identity"  # the proxy reads usage from the answer
        return headers


def _handler(proxy: ModelProxy) -> type[Handler]:
    return type("ProxyHandler", (_ProxyHandler,), {"proxy": proxy})


def _retry_after(headers: http.client.HTTPMessage) -> float | None:
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            with contextlib.suppress(ValueError):
                return float(value) / scale
    return None


def _passed_headers(answer: http.client.HTTPResponse) -> dict[str, str]:
    """Rate-limit and request-id headers reach the CLI, which reads them for its own retries."""
    keep = ("retry-after", "retry-after-ms", "request-id", "x-request-id")
    return {
        k: v
        for k, v in answer.getheaders()
        if k.lower() in keep or "ratelimit" in k.lower() or k.lower() == "x-should-retry"
    }
