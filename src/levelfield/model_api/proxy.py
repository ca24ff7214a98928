"""The recording proxy: every model call an agent in a sandbox makes goes through levelfield.

Every agent given a key (Claude Code, Codex, Gemini CLI, a `command` agent) reaches its model API
through this proxy, named by its base-URL variables (ANTHROPIC_BASE_URL, OPENAI_BASE_URL,
GOOGLE_GEMINI_BASE_URL; a provider of its own for Codex). The proxy runs in the harness, on the
host, and its listening socket is made inside the sandbox's own network namespace, on the
sandbox's loopback: a sandbox without network reaches the proxy and nothing else, and one with
network gets no extra route to the host. The sandbox holds only a per-trial dummy token; the proxy
checks it and puts the user's real key where the client had put the token (`providers.py`), so
model-driven code never holds the key.

It carries model calls only (`allowlist.py`): a request for anything else, in any method or
request-target form, is answered 403 with the rule it broke, recorded as the agent's refused
attempt, and never reaches the upstream. It keeps the trial's model budget (`budget.py`): a billed
call past it is refused in its provider's own shape. Every refusal closes its connection, so no
pipelined request can ride behind it.

This module routes and relays; `_recording.py` keeps what each call was (`records.ApiCall`, the
trajectory, the conversation, keys masked, appended as it happens so a trial that dies still
leaves it). The CLI's own retries are its retry policy: the proxy never retries, it counts a
resent identical request as the next attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import http.client
import json
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
from levelfield.model_api._http import MAX_BODY_BYTES, Handler, LoopbackServer
from levelfield.model_api._recording import CallLog, Exchange
from levelfield.model_api.allowlist import Admitted, Refusal, admit, body_refusal
from levelfield.model_api.budget import Meter, spent_answer, usage_asked
from levelfield.model_api.conversation import AnswerReader
from levelfield.model_api.providers import OFFICIAL_BASE_URL, Credentials, Provider, with_key
from levelfield.model_api.request_policy import IssuedIds, inspect_call
from levelfield.records import ApiCall, ModelBudget

__all__ = ["OFFICIAL_BASE_URL", "ModelProxy", "Provider", "Route", "new_token"]

CLONE_NEWNET = 0x40000000  # <sched.h>
UPSTREAM_TIMEOUT_S = 600.0  # one socket read: a long model answer streams within it
AGENT_IDLE_S = 300.0  # one read from or write to the agent's connection (http.server closes it)
MAX_CONNECTIONS = 32  # open at once from one trial; a CLI's pool and its subagents use < 20
# Request bytes held at once by one trial's calls (each is held a few times over: read, parsed,
# masked, recorded): what bounds the harness's memory whatever the agent sends.
BODY_POOL_BYTES = 2 * MAX_BODY_BYTES
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
        # account routing and billing: the key decides them, never the agent (an organisation
        # or project the key is not in answers 401, which would read as the harness's failure)
        "openai-organization",
        "openai-project",
        "x-goog-user-project",
        "anthropic-workspace-id",
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


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


@functools.cache
def _return_large_buffers() -> None:
    """glibc raises its mmap threshold to the size of each large block freed (up to 32 MiB):
    after the first request body of tens of megabytes, the next ones come from the heap of
    whichever thread read them and stay the process's after they are freed, so a flood of
    bodies grew the harness by hundreds of megabytes (`benchmarks/proxy_flood.py`). A fixed
    threshold keeps every block over 1 MiB mapped on its own and returned when freed."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: its own allocator's way
        ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


class ModelProxy:
    """The proxy of one trial: its routes, its token, what it recorded. `secrets` is the trial's
    masker: the token and the keys join it, so the sandbox's logs mask them too."""

    def __init__(
        self,
        routes: list[Route],
        *,
        conversation: Path | None = None,
        secrets: Masker | None = None,
        meter: Meter | None = None,
        allow_internet: bool = False,
    ) -> None:
        self.routes = {route.prefix: route for route in routes}
        _return_large_buffers()
        self.token = new_token()
        masker = secrets if secrets is not None else Masker()
        masker.add(self.token, *(r.key.get_secret_value() for r in routes if r.key is not None))
        self.log = CallLog(masker, conversation)
        self.meter = meter if meter is not None else Meter(ModelBudget())
        self.refused = 0  # requests without the trial's token: never relayed
        self.allow_internet = allow_internet  # the task's: server-side tools that reach the net
        self.issued = IssuedIds()  # response ids this trial may continue from
        self._lock = threading.Lock()
        self._servers: list[LoopbackServer] = []
        self._upstreams: set[http.client.HTTPConnection] = set()
        self._body_bytes = 0  # reserved by calls in flight, of BODY_POOL_BYTES

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
        server = LoopbackServer(_handler(self), socket_in_namespace(netns), MAX_CONNECTIONS)
        server.start()
        self._servers.append(server)
        return server.port

    def base_urls(self, port: int) -> dict[Provider, str]:
        return {
            route.provider: f"http://127.0.0.1:{port}{prefix}"
            for prefix, route in self.routes.items()
        }

    def close(self) -> None:
        """Stop listening, and end what is still read upstream for a trial that is over (a
        stream its agent left, read on to count its usage; a call that hangs)."""
        for server in self._servers:
            server.stop()
        self._servers.clear()
        with self._lock:
            upstreams = list(self._upstreams)
        for conn in upstreams:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)

    def reserve_body(self, size: int) -> bool:
        """Room for one call's body in the trial's pool; False when the calls in flight hold it."""
        with self._lock:
            if self._body_bytes + size > BODY_POOL_BYTES:
                return False
            self._body_bytes += size
            return True

    def release_body(self, size: int) -> None:
        with self._lock:
            self._body_bytes -= size

    def track_upstream(self, conn: http.client.HTTPConnection, *, alive: bool) -> None:
        with self._lock:
            (self._upstreams.add if alive else self._upstreams.discard)(conn)

    def __enter__(self) -> ModelProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def providers(self) -> list[str]:
        return [route.provider for route in self.routes.values()]

    def is_trial_token(self, given: Credentials) -> bool:
        """Every credential the request carries must be the token, and it must carry one."""
        values = given.values()
        return bool(values) and all(
            secrets.compare_digest(v.encode(), self.token.encode()) for v in values
        )


class _ProxyHandler(Handler):
    """Relays one connection's requests for `proxy` (set on the subclass `_handler` makes)."""

    proxy: ModelProxy
    timeout = AGENT_IDLE_S  # an idle connection does not hold its thread for ever

    def __getattr__(self, name: str) -> Any:
        """Every method, known or not (TRACE, CONNECT, PROPFIND), comes to `_relay`: what is
        not a model call's method is refused there and recorded, not answered 501 unseen."""
        if name.startswith("do_"):
            return self._relay
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """A request too malformed to parse (http.server answers it): recorded as refused."""
        line = getattr(self, "requestline", "") or ""
        method = getattr(self, "command", None) or line.partition(" ")[0]
        self.proxy.log.refuse(method, line, code, f"not a request the proxy reads: {message}")
        self.close_connection = True
        super().send_error(code, message, explain)

    @property
    def target(self) -> str:
        """The request-target as sent: http.server's `path` has already folded a leading `//`,
        and the allow-list judges what the agent sent, not what a parser made of it."""
        words = self.requestline.split()
        return words[1] if len(words) >= 2 else self.path

    def _relay(self) -> None:
        admitted = admit(self.command, self.target, self.headers, self.proxy.providers)
        if isinstance(admitted, Refusal):
            self._refuse(admitted.status, admitted.rule)
            return
        if self.headers.get("Upgrade"):  # a WebSocket transport: the CLI falls back to HTTP
            self.close_connection = True  # its body, if any, is not read
            self.send_json(426, {"error": {"message": "the proxy relays HTTP only"}})
            return
        given = Credentials.of(self.headers, urllib.parse.urlsplit(admitted.path).query)
        if not self.proxy.is_trial_token(given):
            self.proxy.note_refused()
            self.close_connection = True
            self.send_json(401, {"error": {"message": "not this trial's token", "code": 401}})
            return
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        length = MAX_BODY_BYTES if chunked else _length(self.headers.get("Content-Length"))
        if length > MAX_BODY_BYTES:
            self._refuse(413, f"request body of {length} bytes, over {MAX_BODY_BYTES}")
            return
        if not self.proxy.reserve_body(length):
            self._refuse(429, f"the trial's calls in flight hold {BODY_POOL_BYTES} request bytes")
            return
        try:
            self._judged(admitted, given)
        finally:
            self.proxy.release_body(length)

    def _judged(self, admitted: Admitted, given: Credentials) -> None:
        try:
            body = self.read_body()
        except ValueError as exc:
            self._refuse(413, f"request body: {exc}")
            return
        doc = _json(body)
        refusal = body_refusal(admitted, doc)
        sent = body
        if refusal is None:
            judged = inspect_call(
                admitted,
                body,
                doc,
                allow_internet=self.proxy.allow_internet,
                issued=self.proxy.issued,
            )
            refusal, sent = judged.refusal, judged.body
        if refusal is not None:
            self._refuse(refusal.status, refusal.rule)
            return
        parsed = doc if sent is body else None  # the recording's, unless the proxy rewrote it
        del body  # one copy of the request in memory: what goes out
        if admitted.endpoint.billed:
            self._metered(admitted, sent, doc, given, parsed)
        else:
            self._call(admitted, sent, given, parsed=parsed)

    def _metered(
        self, admitted: Admitted, body: bytes, doc: Any, given: Credentials, parsed: Any
    ) -> None:
        """A billed call, judged against the trial's model budget before it goes (`budget.py`
        says how), in one of the budget's places for calls in flight."""
        meter = self.proxy.meter
        model = admitted.model or (doc.get("model") if isinstance(doc, dict) else None)
        with meter.slot():
            refused = meter.refusal(model, doc)
            if refused is not None and refused.spent:
                status, answer = spent_answer(admitted.provider, refused.why)
                self._refuse(status, refused.why, answer, outcome="budget_exhausted")
                return
            if refused is not None:
                self._refuse(403, refused.why)
                return
            if meter.enabled and admitted.endpoint.name == "POST /chat/completions":
                asked = usage_asked(body)
                parsed, body = (parsed if asked is body else None), asked
            ex = self._call(admitted, body, given, model, parsed=parsed)
            if ex.reported_no_usage():
                meter.charge(model, None, None, sized=ex.size())

    def _refuse(
        self, status: int, why: str, answer: Any = None, *, outcome: str = "refused"
    ) -> None:
        """Answer, record the agent's attempt, and close the connection: nothing pipelined
        behind a refused request is read."""
        self.proxy.log.refuse(self.command, self.target, status, why, outcome)
        self.close_connection = True
        said = f"levelfield proxy: {why}"
        # Anthropic's error shape, with the fields that OpenAI's and Google's clients read
        error = {"type": "permission_error", "message": said, "code": status}
        body = answer or {"type": "error", "error": {**error, "status": "PERMISSION_DENIED"}}
        with contextlib.suppress(OSError):
            self.send_json(status, body, {"Connection": "close"})

    def _call(
        self,
        admitted: Admitted,
        body: bytes,
        given: Credentials,
        model: str | None = None,
        *,
        parsed: Any = None,
    ) -> Exchange:
        """`parsed`: the request as the agent sent it, parsed once; the recording keeps it in
        place of parsing the body again, unless the proxy rewrote the body on its way."""
        route = self.proxy.routes[f"/{admitted.provider}"]
        ex = Exchange(
            route.provider,
            self.command,
            admitted.path,
            body,
            datetime.now(UTC),
            time.monotonic(),
            client=self.connection,
            model=model,
        )
        ex.doc = parsed
        log = self.proxy.log
        ex.attempt = log.attempt_of(ex)
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
        return ex

    def _bill(self, ex: Exchange) -> None:
        """Charge the usage the answer has reported so far, before the agent has the part that
        reports it: its next call is then judged on it, however fast it comes."""
        tokens_in, tokens_out = ex.unbilled()
        if tokens_in or tokens_out:
            self.proxy.meter.charge(ex.model, tokens_in, tokens_out)

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
        self.proxy.track_upstream(conn, alive=True)
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
                self.proxy.issued.note_answer(data)
                ex.answer_bytes = len(data)
                ex.reader.finish(data)
                self._bill(ex)
                ex.complete = True
                content_type = answer.getheader("Content-Type") or "application/json"
                send = lambda: self.send_bytes(  # noqa: E731
                    answer.status, data, content_type, _passed_headers(answer)
                )
                ex.begun = True
                ex.answered = self._to_agent(ex, send)
        finally:
            self.proxy.track_upstream(conn, alive=False)
            conn.close()

    def _stream(self, ex: Exchange, answer: http.client.HTTPResponse) -> None:
        """Relay the events as they come. A read that fails upstream ends the stream to the agent
        as broken (no final chunk), so the agent sees what the proxy saw. Under a budget, a
        stream the agent leaves is read on to its end, so that its usage is counted."""
        start = lambda: self.start_stream(  # noqa: E731
            answer.status, answer.getheader("Content-Type") or "", _passed_headers(answer)
        )
        ex.begun = True
        sending = self._to_agent(ex, start)
        if not sending and not self.proxy.meter.enabled:
            return
        while True:
            try:
                chunk = answer.read1(CHUNK_BYTES)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                ex.error = f"{type(exc).__name__}: {exc}"
                ex.reader.finish()
                self.proxy.log.remember(ex, ok=False)  # before the agent sees it break
                self.close_connection = True
                return
            if not chunk:
                break
            ex.answer_bytes += len(chunk)
            self.proxy.issued.note_answer(chunk)
            if ex.reader.feed(chunk) and ex.first_token_s is None:
                ex.first_token_s = time.monotonic() - ex.t0
            self._bill(ex)
            if ex.reader.error is not None:  # an error event: the agent may retry at once
                self.proxy.log.remember(ex, ok=False)
            if sending and not self._to_agent(ex, lambda c=chunk: self.write_chunk(c)):  # type: ignore[misc]
                sending = False
                if not self.proxy.meter.enabled:
                    ex.reader.finish()
                    return
        ex.reader.finish()
        self._bill(ex)
        self.proxy.log.remember(ex, ok=ex.outcome()[0] == "ok")  # a stream ended short, too
        ex.complete = True
        ex.answered = sending and self._to_agent(ex, self.end_stream)

    def _relayed_headers(self) -> dict[str, str]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        headers["Accept-Encoding"] = "identity"  # the proxy reads usage from the answer
        return headers


def _length(value: str | None) -> int:
    """A Content-Length as a size to reserve: a malformed one is read (and refused) later."""
    try:
        return max(int(value or 0), 0)
    except ValueError:
        return 0


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return None


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
