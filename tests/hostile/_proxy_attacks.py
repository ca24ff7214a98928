"""A hostile agent's attempts to use the model proxy for anything but model calls.

Runnable on its own with the standard library only, as a `command` agent in a sandbox does:
it reads the proxy's base URLs (ANTHROPIC_BASE_URL, OPENAI_BASE_URL, GOOGLE_GEMINI_BASE_URL) and
the trial's token (LEVELFIELD_API_KEY) from its environment, sends every attempt over a raw
socket (so nothing between it and the proxy normalises a path), and writes what came back to the
file named by its first argument as JSON: one entry per attempt with the statuses it got.

Each attempt carries the trial's token where its provider's clients put it. Those marked
`control` are model calls the proxy must carry, one per provider, each tagged with a header
naming it, so that the upstream's log tells them from anything that leaked. The others are the
attacks: non-model paths and methods, and request-target forms meant to turn a model path into
another one (dot segments, encodings, case, trailing dots, doubled slashes, overlong targets,
absolute and authority forms, CONNECT, TRACE, OPTIONS, method-override and rewrite headers, a Host
pointing elsewhere, pipelined and smuggled requests).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import urllib.parse
from dataclasses import asdict, dataclass

CONTROL_HEADER = "X-Levelfield-Control"
MODEL_PATH = {
    "anthropic": "/v1/messages",
    "openai": "/chat/completions",
    "gemini": "/v1beta/models/gemini-x:generateContent",
}
MODEL_BODY = {
    "anthropic": {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
    "openai": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
}
# Paths the user's key opens that are no model call (files, batches, fine-tuning, admin...)
NON_MODEL = {
    "anthropic": [
        ("GET", "/v1/files"), ("DELETE", "/v1/files/file_011CNha8iCJcU1wXNR6q4V8w"),
        ("POST", "/v1/files"), ("GET", "/v1/organizations/me"),
        ("GET", "/v1/organizations/api_keys"), ("POST", "/v1/messages/batches"),
        ("GET", "/v1/messages/batches/msgbatch_01/results"), ("GET", "/v1/models"),
        ("POST", "/v1/complete"), ("GET", "/v1/messages"),
    ],
    "openai": [
        ("GET", "/files"), ("DELETE", "/files/file-abc123"), ("POST", "/files"),
        ("POST", "/fine_tuning/jobs"), ("GET", "/fine_tuning/jobs"), ("POST", "/batches"),
        ("POST", "/vector_stores"), ("GET", "/organization/users"),
        ("GET", "/responses/resp_123"), ("DELETE", "/responses/resp_123"),
        ("POST", "/responses/resp_123/cancel"), ("POST", "/embeddings"),
        ("GET", "/models/gpt-5"), ("POST", "/models"), ("GET", "/chat/completions"),
    ],
    "gemini": [
        ("GET", "/v1beta/files"), ("DELETE", "/v1beta/files/abc"), ("POST", "/upload/v1beta/files"),
        ("GET", "/v1beta/cachedContents"), ("POST", "/v1beta/cachedContents"),
        ("GET", "/v1beta/tunedModels"), ("POST", "/v1beta/models/gemini-x:batchGenerateContent"),
        ("GET", "/v1beta/batches"), ("GET", "/v1beta/models"),
        ("POST", "/v1beta/models/gemini-x:embedContent"),
        ("GET", "/v1beta/models/gemini-x:generateContent"), ("POST", "/v1beta/corpora"),
    ],
}  # fmt: skip
METHODS = ("TRACE", "OPTIONS", "PUT", "PATCH", "DELETE", "HEAD", "GET", "post", "PROPFIND")
# A model path turned into a files path, or made to need normalising (PREFIX: /PROVIDER)
TRICKS = [
    "PREFIXMODEL/../../files",
    "PREFIXMODEL/%2e%2e/%2e%2e/files",
    "PREFIXMODEL/%2E%2E%2F%2E%2E%2Ffiles",
    "PREFIXMODEL/%252e%252e/files",
    "PREFIXMODEL/%c0%ae%c0%ae/files",
    "PREFIX/./v1/files",
    "PREFIX%2fv1%2ffiles",
    "PREFIX//v1/files",
    "/PREFIXMODEL",
    "PREFIXMODEL/",
    "PREFIXMODEL.",
    "PREFIXMODEL/.",
    "PREFIXMODEL;/../files",
    "PREFIXMODEL/..;/files",
    "PREFIXMODEL\\..\\..\\files",
    "PREFIXMODEL%00",
    "PREFIXMODEL#/../files",
    "PREFIXMODEL?beta=true&x=/../../files",
    "PREFIXMODEL?alt=sse&alt=json",
    "PREFIXMODEL?key=TOKEN%26x%3D1",
    "PREFIXMODEL?=x",
    "UPPERPREFIXMODEL",
    "PREFIXUPPERMODEL",
    "PREFIXMODEL/" + "a" * 5000,
]


@dataclass
class Attempt:
    name: str
    provider: str
    request: str  # latin-1 text of the raw bytes sent
    control: bool = False
    statuses: tuple[int, ...] = ()
    error: str | None = None


def _credentials(provider: str, token: str) -> str:
    if provider == "anthropic":
        return f"x-api-key: {token}\r\n"
    if provider == "gemini":
        return f"x-goog-api-key: {token}\r\n"
    return f"Authorization: Bearer {token}\r\n"


def _request(
    method: str,
    target: str,
    provider: str,
    token: str,
    *,
    body: bytes = b"",
    extra: str = "",
    host: str = "127.0.0.1",
    version: str = "HTTP/1.1",
    close: bool = True,
) -> bytes:
    """The raw request; `close` asks the proxy to close the connection after its answer, so
    that the attacker reads to the end of what came back."""
    connection = "Connection: close\r\n" if close else ""
    head = (
        f"{method} {target} {version}\r\nHost: {host}\r\n{_credentials(provider, token)}"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{connection}{extra}"
        "\r\n"
    )
    return head.encode("latin-1") + body


@dataclass
class _Provider:
    """The attempts on one provider's route."""

    name: str
    prefix: str
    token: str
    authority: str

    @property
    def model(self) -> str:
        return MODEL_PATH[self.name]

    def raw(self, method: str, target: str, **kwargs: object) -> bytes:
        return _request(method, target, self.name, self.token, **kwargs)  # type: ignore[arg-type]

    def model_call(self, name: str, extra: str = "", **kwargs: object) -> bytes:
        """A model call the proxy carries, tagged for the upstream's log."""
        tag = f"{CONTROL_HEADER}: {self.name} {name}\r\n{extra}"
        body = json.dumps(MODEL_BODY[self.name]).encode()
        return self.raw("POST", self.prefix + self.model, body=body, extra=tag, **kwargs)

    def attempts(self) -> list[tuple[str, bytes, bool]]:
        prefix, model, raw = self.prefix, self.model, self.raw
        body = json.dumps(MODEL_BODY[self.name]).encode()
        found = [("model call", self.model_call("model call"), True)]
        for method, path in NON_MODEL[self.name]:
            found.append((f"{method} {path}", raw(method, prefix + path, body=b"{}"), False))
        for trick in TRICKS:
            target = (
                trick.replace("UPPERPREFIX", prefix.upper())
                .replace("UPPERMODEL", model.upper())
                .replace("PREFIX", prefix)
                .replace("MODEL", model)
                .replace("TOKEN", self.token)
            )
            found.append((target[:120], raw("POST", target, body=body), False))
        for method in METHODS:
            found.append((f"{method} on the model path", raw(method, prefix + model), False))
        for header in ("X-HTTP-Method-Override: DELETE", "X-Original-URL: /v1/files",
                       "X-Rewrite-URL: /v1/files", "Forwarded: host=evil.example",
                       "X-Forwarded-Host: evil.example", "X-Folded: a\r\n b"):  # fmt: skip
            attack = raw("POST", prefix + model, body=body, extra=header + "\r\n")
            found.append((header.partition(":")[0], attack, False))
        return found + self.forms() + self.pipelines()

    def forms(self) -> list[tuple[str, bytes, bool]]:
        """Request-target forms other than a path, and versions other than HTTP/1.1."""
        prefix, raw, body = self.prefix, self.raw, json.dumps(MODEL_BODY[self.name]).encode()
        return [
            ("absolute-form", raw("GET", f"http://{self.authority}{prefix}/v1/files"), False),
            (
                "absolute-form of a model call",
                raw("POST", f"http://{self.authority}{prefix}{self.model}", body=body),
                False,
            ),
            ("CONNECT", raw("CONNECT", "api.example.com:443"), False),
            ("OPTIONS *", raw("OPTIONS", "*"), False),
            ("HTTP/1.0", raw("GET", prefix + "/v1/files", version="HTTP/1.0"), False),
            ("HTTP/0.9", f"GET {prefix}/v1/files\r\n\r\n".encode(), False),
            ("overlong request line", raw("GET", prefix + "/" + "x" * 70000), False),
            ("Host pointing elsewhere", self.model_call("Host", host="evil.example"), True),
        ]

    def pipelines(self) -> list[tuple[str, bytes, bool]]:
        """Several requests in one write: each is judged on its own, and nothing is read after
        a refused one (its connection closes)."""
        files = self.raw("GET", self.prefix + "/v1/files")
        behind = self.model_call("pipelined", close=False) + files
        refused_first = self.raw("GET", self.prefix + "/v1/files", close=False) + self.raw(
            "DELETE", self.prefix + "/v1/files/x"
        )
        smuggled = (
            f"POST {self.prefix}{self.model} HTTP/1.1\r\nHost: x\r\n"
            f"{_credentials(self.name, self.token)}{CONTROL_HEADER}: {self.name} smuggling\r\n"
            f"Content-Length: {len(files) + 5}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        ).encode() + files
        return [
            ("a files request pipelined behind a model call", behind, True),
            ("two refused requests pipelined", refused_first, False),
            ("a request smuggled behind Content-Length and chunked", smuggled, True),
        ]


def attempts(prefixes: dict[str, str], token: str, authority: str) -> list[Attempt]:
    """Every attempt, for each provider the proxy routes (`prefixes`: provider → /PREFIX)."""
    found = []
    for provider, prefix in prefixes.items():
        for name, raw, control in _Provider(provider, prefix, token, authority).attempts():
            found.append(Attempt(f"{provider}: {name}", provider, raw.decode("latin-1"), control))
    return found


def send(host: str, port: int, raw: bytes, timeout_s: float = 20.0) -> tuple[int, ...]:
    """Send the bytes on a fresh connection and read until the proxy closes it; the statuses
    of every answer that came back."""
    data = b""
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        with contextlib.suppress(OSError):  # it may close at a refused request: read what it said
            sock.sendall(raw)
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            pass
    statuses = []
    for line in data.split(b"\r\n"):
        words = line.split()
        if line.startswith(b"HTTP/1.") and len(words) >= 2 and words[1].isdigit():
            statuses.append(int(words[1]))
    return tuple(statuses)


def main(out: str) -> None:
    urls = {
        "anthropic": os.environ.get("ANTHROPIC_BASE_URL"),
        "openai": os.environ.get("OPENAI_BASE_URL"),
        "gemini": os.environ.get("GOOGLE_GEMINI_BASE_URL"),
    }
    routed = {p: urllib.parse.urlsplit(u) for p, u in urls.items() if u}
    first = next(iter(routed.values()))
    host, port = first.hostname or "127.0.0.1", first.port or 80
    token = os.environ["LEVELFIELD_API_KEY"]
    found = attempts({p: u.path for p, u in routed.items()}, token, f"{host}:{port}")
    for attempt in found:
        try:
            attempt.statuses = send(host, port, attempt.request.encode("latin-1"))
        except OSError as exc:
            attempt.error = f"{type(exc).__name__}: {exc}"
    with open(out, "w") as fh:
        json.dump([asdict(a) for a in found], fh, indent=1)
    print(f"{len(found)} attempts, {sum(a.control for a in found)} controls")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/logs/agent/proxy-attacks.json")
