"""The host's HTTP proxy, relayed into a trial from outside: no proxy credential enters a sandbox.

A host behind a proxy names it in HTTPS_PROXY (and its kin), often with its credentials in the URL
(`http://user:password@proxy:3128`). Passed into the sandbox, the credential is the agent's to
print in any encoding (masking catches it plain, not reversed or in base64), so it never goes
in. Instead, a relay runs in the harness for each phase that has network. It listens on the
sandbox's own loopback (its socket made in the trial's network namespace, as the model proxy's
is), and the sandbox's proxy variables name it: `http://127.0.0.1:PORT`, no credential. The
relay forwards each connection to the real proxy from the host, adding the credential
(`Proxy-Authorization: Basic ...`) to the request's head, and then passes the bytes through as
they are: a CONNECT tunnel (HTTPS, whatever the client) or one plain-HTTP request per connection
(`Connection: close`, so every request's head is the relay's to rewrite). A proxy on the host's
own loopback, or on an address the trial's seal refuses, is reached the same way.

Only `http://` proxies can be relayed; any other scheme (https://, socks5://) is refused before
the run with a message that says how to run. NO_PROXY and the CA settings are passed on as they
are: they hold no secret.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import socketserver
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from levelfield.errors import RunConfigError

PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
PASSED_ENV = ("NO_PROXY", "no_proxy", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE")
HEAD_MAX_BYTES = 64 << 10  # a request line and its headers; more is not a proxy request
CONNECT_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 600.0  # one read on a tunnel: a slow download keeps it going
MAX_CONNECTIONS = 64  # per relay; more wait for a free one
CHUNK_BYTES = 64 << 10
_DROPPED = (b"proxy-authorization", b"proxy-connection", b"connection", b"keep-alive")


@dataclass(frozen=True, slots=True)
class Upstream:
    """The host's proxy: where the relay connects, and the credential it adds."""

    host: str
    port: int
    authorization: str | None  # the Proxy-Authorization value; None without credentials

    def __repr__(self) -> str:  # never the credential, even in a traceback
        return f"Upstream({self.host}:{self.port}, {'with' if self.authorization else 'no'} auth)"


def upstreams(environ: Mapping[str, str] | None = None) -> dict[str, Upstream]:
    """Each proxy variable of the host's environment → its upstream. RunConfigError for a
    proxy that cannot be relayed, naming the variable but never its credential."""
    env = os.environ if environ is None else environ
    found: dict[str, Upstream] = {}
    for name in PROXY_ENV:
        value = env.get(name, "").strip()
        if value:
            found[name] = _parsed(name, value)
    return found


def check(environ: Mapping[str, str] | None = None) -> None:
    """Before a run: every proxy variable is one the relay can serve."""
    upstreams(environ)


def _parsed(name: str, value: str) -> Upstream:
    try:
        parts = urllib.parse.urlsplit(value if "://" in value else f"http://{value}")
        host, port = parts.hostname, parts.port or 80
    except ValueError as exc:
        raise RunConfigError(f"{name} is not a proxy URL: {type(exc).__name__}") from None
    if parts.scheme != "http" or not host:
        raise RunConfigError(
            f"{name} names a {parts.scheme or 'schemeless'} proxy: levelfield relays the host's "
            "proxy into each trial, so that no credential enters the sandbox, and it relays "
            f"http:// proxies only. Run a local http:// proxy that forwards to it (no "
            f"credential in its URL), or unset {name} for this run"
        )
    auth = None
    if parts.username is not None:
        user = urllib.parse.unquote(parts.username)
        password = urllib.parse.unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return Upstream(host, port, auth)


@contextlib.contextmanager
def relayed_environment(
    netns: Path | None, environ: Mapping[str, str] | None = None
) -> Iterator[dict[str, str]]:
    """The sandbox's network variables while the relays run: each proxy variable names a relay
    on the loopback of the namespace at `netns` (the sandbox's; None: the host's), one relay per
    distinct upstream; NO_PROXY and the CA settings pass as they are."""
    env = os.environ if environ is None else environ
    passed = {k: env[k] for k in PASSED_ENV if k in env}
    wanted = upstreams(env)
    relays: dict[Upstream, Relay] = {}
    try:
        for upstream in wanted.values():
            if upstream not in relays:
                relays[upstream] = Relay(upstream, netns).start()
        urls = {k: f"http://127.0.0.1:{relays[u].port}" for k, u in wanted.items()}
        yield {**passed, **urls}
    finally:
        for relay in relays.values():
            relay.stop()


class Relay(socketserver.ThreadingTCPServer):
    """One listening socket in the sandbox's namespace, relaying to one upstream proxy."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, upstream: Upstream, netns: Path | None) -> None:
        from levelfield.model_api.proxy import socket_in_namespace

        sock = socket_in_namespace(netns)
        super().__init__(sock.getsockname()[:2], _Connection, bind_and_activate=False)
        self.socket.close()
        self.socket = sock
        self.upstream = upstream
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.socket.getsockname()[1])

    def start(self) -> Relay:
        self._thread = threading.Thread(target=self.serve_forever, name="egress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Connection(socketserver.BaseRequestHandler):
    server: Relay

    def handle(self) -> None:
        with self.server.slots:
            client: socket.socket = self.request
            client.settimeout(IDLE_TIMEOUT_S)
            try:
                head, rest = _read_head(client)
            except (OSError, ValueError):
                return
            upstream = self.server.upstream
            try:
                remote = socket.create_connection(
                    (upstream.host, upstream.port), timeout=CONNECT_TIMEOUT_S
                )
            except OSError as exc:
                _answer(client, 502, f"levelfield relay: the host's proxy: {exc.strerror}")
                return
            with remote:
                remote.settimeout(IDLE_TIMEOUT_S)
                remote.sendall(rewritten(head, upstream.authorization) + rest)
                _splice(client, remote)


def _read_head(client: socket.socket) -> tuple[bytes, bytes]:
    """The request's head (up to its blank line) and whatever came after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(CHUNK_BYTES)
        if not chunk:
            raise ValueError("closed before a request")
        data += chunk
        if len(data) > HEAD_MAX_BYTES:
            _answer(client, 431, "levelfield relay: request head too large")
            raise ValueError("head too large")
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def rewritten(head: bytes, authorization: str | None) -> bytes:
    """The head with the client's proxy headers replaced by the relay's: its credential, and
    `Connection: close` for a plain request so that no second request passes unrewritten."""
    lines = head.split(b"\r\n")
    request, headers = lines[0], lines[1:]
    kept = [h for h in headers if h.split(b":", 1)[0].strip().lower() not in _DROPPED]
    if authorization is not None:
        kept.append(b"Proxy-Authorization: " + authorization.encode())
    if not request.upper().startswith(b"CONNECT "):
        kept.append(b"Connection: close")
    return b"\r\n".join([request, *kept]) + b"\r\n\r\n"


def _splice(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until either side closes; the other direction in its own thread."""
    other = threading.Thread(target=_pump, args=(b, a), daemon=True)
    other.start()
    _pump(a, b)
    other.join(IDLE_TIMEOUT_S)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(CHUNK_BYTES):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def _answer(client: socket.socket, status: int, text: str) -> None:
    body = text.encode()
    reply = f"HTTP/1.1 {status} Relay\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        client.sendall(reply.encode() + body)
