"""A package index with one file of known size, served from a network namespace the test makes.

Run as a script inside that namespace (`ip netns exec NAME python _package_index.py ...`): a
PEP 503 page at /simple/<project>/ linking the file with its sha256, and the file at
/files/<name>, sent at a fixed rate so that a download lasts long enough to be seen by a sampler.
The namespace stands for the outside network: joined to the host by a veth of its own, with an
address from the benchmarking range (198.18.0.0/15), and counted among the host's uplinks while
it serves, so that a trial's sealed link (sandbox/_netns.py), which forwards only out of an
uplink, reaches it as it would reach PyPI. The host reaches it too (the index probe), and none of
it leaves the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import ipaddress
import itertools
import os
import socket
import socketserver
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from levelfield.sandbox import _netns

PORT = 8080
CHUNK = 64 * 1024
START_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class PackageIndex:
    host: str
    port: int
    project: str
    filename: str
    size_bytes: int

    @property
    def index_url(self) -> str:
        return f"http://{self.host}:{self.port}/simple/"

    @property
    def file_path(self) -> str:
        return f"/files/{self.filename}"

    def download_command(self, dest: str = "/app/downloaded") -> str:
        """bash's /dev/tcp: works in any image with bash, with no curl or python needed."""
        return self.fetch_command(dest) + " && touch /app/done"

    def fetch_command(self, dest: str = "/app/downloaded") -> str:
        """Download the file; fails unless all of it (and the headers) arrived."""
        return (
            f"exec 3<>/dev/tcp/{self.host}/{self.port} && "
            f"printf 'GET {self.file_path} HTTP/1.0\\r\\nHost: index\\r\\n\\r\\n' >&3 && "
            f"cat <&3 > {dest} && exec 3<&- && "
            f'test "$(wc -c < {dest})" -gt {self.size_bytes}'
        )


@contextlib.contextmanager
def package_index(
    root: Path,
    *,
    size_bytes: int,
    rate_bps: int | list[int],
    project: str = "probe",
    status: int = 200,
) -> Iterator[PackageIndex]:
    """Start the index in its own namespace; everything it made is removed on exit. Several
    rates are taken in turn, one per download of the file. Any `status` but 200 is what every
    request gets instead (503: an index that is down)."""
    run_id = f"idx{os.getpid()}"
    filename = f"{project}-1.0-py3-none-any.whl"
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    (files / filename).write_bytes(os.urandom(size_bytes))
    script = Path(__file__).resolve()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with _outside(f"{run_id}-{root.name[-12:]}") as (name, address):
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, str(script), "--bind", address,
             "--root", str(files), "--project", project, "--rate",
             ",".join(map(str, rate_bps if isinstance(rate_bps, list) else [rate_bps])),
             "--status", str(status)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_listening(address, PORT, server)
            yield PackageIndex(address, PORT, project, filename, size_bytes)
        finally:
            server.kill()
            server.wait()


OUTSIDE_POOL = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544: for benchmarks, never routed


@contextlib.contextmanager
def _outside(tag: str) -> Iterator[tuple[str, str]]:
    """A namespace joined to the host by a veth that counts as an uplink while it lives: the
    namespace's name and its address."""
    name = f"lfidx-{tag}"
    digest = hashlib.sha256(name.encode()).hexdigest()
    host_if, inner_if = f"lfi{digest[:10]}", f"lfo{digest[:10]}"
    blocks = list(OUTSIDE_POOL.subnets(new_prefix=30))
    host_addr, address = list(blocks[int(digest[:8], 16) % len(blocks)].hosts())
    script = [
        f"netns add {name}",
        f"link add {host_if} type veth peer name {inner_if} netns {name}",
        f"addr add {host_addr}/30 dev {host_if}",
        f"link set {host_if} up",
        f"-n {name} addr add {address}/30 dev {inner_if}",
        f"-n {name} link set {inner_if} up",
        f"-n {name} link set lo up",
        f"-n {name} route add default via {host_addr}",
    ]
    uplinks = _netns.uplinks
    try:
        for line in script:
            subprocess.run(["ip", *line.split()], check=True, capture_output=True)
        _netns.uplinks = lambda: (*uplinks(), host_if)  # type: ignore[assignment]
        yield name, str(address)
    finally:
        _netns.uplinks = uplinks  # type: ignore[assignment]
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _wait_listening(host: str, port: int, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"package index at {host}:{port} did not start")


def _handler(
    root: Path, project: str, rates: list[int], status: int = 200
) -> type[BaseHTTPRequestHandler]:
    (wheel,) = sorted(root.iterdir())
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    turn = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if status != 200:
                self.send_error(status)
            elif self.path.rstrip("/") == f"/simple/{project}":
                link = f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>'
                self._send(f"<html><body>{link}</body></html>".encode(), "text/html")
            elif self.path == f"/files/{wheel.name}":
                rate = rates[next(turn) % len(rates)]
                self._send(wheel.read_bytes(), "application/octet-stream", rate)
            else:
                self.send_error(404)

        def _send(self, body: bytes, kind: str, rate: int = 0) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            started = time.monotonic()
            for offset in range(0, len(body), CHUNK):
                self.wfile.write(body[offset : offset + CHUNK])
                if rate:
                    ahead = (offset + CHUNK) / rate - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)

        def log_message(self, *args: object) -> None:
            return

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bind", required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--project", required=True)
    parser.add_argument("--rate", default="0", help="bytes/s, or several taken in turn: 1,4")
    parser.add_argument("--status", type=int, default=200, help="answer every request so")
    args = parser.parse_args()
    rates = [int(r) for r in args.rate.split(",")]
    handler = _handler(args.root, args.project, rates, args.status)
    _Server((args.bind, PORT), handler).serve_forever()


class _Server(ThreadingHTTPServer):
    def server_bind(self) -> None:
        """Without http.server's getfqdn(): the namespace has no resolver to ask (10 s)."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), PORT


if __name__ == "__main__":
    main()
