"""The small HTTP/1.1 server both loopback model endpoints are built on: the recording proxy and
the scripted model. Standard library only, so neither needs an SDK or a web framework.

Streams go out with chunked transfer encoding, so a connection stays reusable after a
server-sent-events answer: Node's fetch and Rust's hyper both keep their connections pooled.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 32 << 20  # Anthropic's own request limit (32 MB); a CLI's calls stay under it
LINE_BYTES = 1024  # a chunk-size line: hex digits and extensions


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server on a socket made elsewhere (possibly in another network
    namespace), or on a fresh loopback port. With `max_connections`, a connection beyond that
    many open at once is closed unanswered: each costs the harness a thread, and the proxy's
    clients are untrusted."""

    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog is 5: calls made at once (a CLI's parallel calls, a trial's
    # burst) beyond it could find the connection reset before its request was read
    request_queue_size = 128

    def __init__(
        self,
        handler: type[BaseHTTPRequestHandler],
        sock: socket.socket | None = None,
        max_connections: int | None = None,
    ):
        if sock is None:
            super().__init__(("127.0.0.1", 0), handler)
        else:
            super().__init__(sock.getsockname()[:2], handler, bind_and_activate=False)
            self.socket.close()
            self.socket = sock
            self.server_address = sock.getsockname()[:2]
        self._thread: threading.Thread | None = None
        self._open = threading.BoundedSemaphore(max_connections) if max_connections else None

    def process_request(self, request: Any, client_address: Any) -> None:
        if self._open is not None and not self._open.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            if self._open is not None:
                self._open.release()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> LoopbackServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 <= length <= MAX_BODY_BYTES:
            raise ValueError(f"request body of {length} bytes")
        return self.rfile.read(length) if length else b""

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            size = int(self.rfile.readline(LINE_BYTES).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                self.rfile.readline(LINE_BYTES)
                return b"".join(parts)
            total += size
            if total > MAX_BODY_BYTES:
                raise ValueError(f"chunked request body over {MAX_BODY_BYTES} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline(LINE_BYTES)

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def send_bytes(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def start_stream(
        self, status: int, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()

    def write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One server-sent event; `data` is JSON-encoded unless it is already a string."""
    text = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()
