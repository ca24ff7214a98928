"""The host's proxy, relayed into a trial from outside (agents/_egress.py): the sandbox is told a
relay with no credential, and the relay adds the credential on its way to the real proxy."""

from __future__ import annotations

import base64
import socket
import threading

import pytest

from levelfield.agents import _egress
from levelfield.errors import RunConfigError

PASSWORD = "relay-unit-pw-0123456789"


def test_the_credential_goes_in_the_head_and_the_clients_own_is_dropped() -> None:
    auth = "Basic " + base64.b64encode(f"u:{PASSWORD}".encode()).decode()
    head = b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\nProxy-Authorization: Basic eA=="
    out = _egress.rewritten(head, auth)
    assert out.count(b"Proxy-Authorization") == 1 and auth.encode() in out
    assert b"eA==" not in out and b"Connection: close" not in out  # a tunnel stays a tunnel
    plain = _egress.rewritten(b"GET http://a/ HTTP/1.1\r\nConnection: keep-alive", None)
    assert plain.endswith(b"Connection: close\r\n\r\n") and b"keep-alive" not in plain


def test_only_http_proxies_are_relayed_and_the_refusal_names_no_credential() -> None:
    found = _egress.upstreams({"HTTPS_PROXY": f"http://u:{PASSWORD}@proxy.example:3128"})
    assert found["HTTPS_PROXY"].host == "proxy.example" and found["HTTPS_PROXY"].port == 3128
    assert PASSWORD not in repr(found)
    bare = _egress.upstreams({"http_proxy": "proxy.example:8080"})["http_proxy"]
    assert (bare.port, bare.authorization) == (8080, None)
    with pytest.raises(RunConfigError) as refused:
        _egress.check({"ALL_PROXY": f"socks5://u:{PASSWORD}@proxy.example:1080"})
    assert "ALL_PROXY" in str(refused.value) and PASSWORD not in str(refused.value)
    assert "unset ALL_PROXY" in str(refused.value)


def test_a_relay_reaches_the_proxy_with_the_credential_the_sandbox_never_had() -> None:
    upstream = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def proxy() -> None:
        conn, _ = upstream.accept()
        with conn:
            heads.append(conn.recv(65536))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\ntunnel bytes")

    threading.Thread(target=proxy, daemon=True).start()
    port = upstream.getsockname()[1]
    environ = {"HTTPS_PROXY": f"http://u:{PASSWORD}@127.0.0.1:{port}", "NO_PROXY": "localhost"}
    with _egress.relayed_environment(None, environ) as env:  # None: the host's own namespace
        assert PASSWORD not in "".join(env.values()) and env["NO_PROXY"] == "localhost"
        relay_port = int(env["HTTPS_PROXY"].rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", relay_port), timeout=10) as client:
            client.sendall(b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test\r\n\r\n")
            answer = b""
            while b"tunnel bytes" not in answer and (chunk := client.recv(4096)):
                answer += chunk
    upstream.close()
    expected = base64.b64encode(f"u:{PASSWORD}".encode())
    assert heads and b"Proxy-Authorization: Basic " + expected in heads[0]
    assert answer.startswith(b"HTTP/1.1 200")
