"""What a hostile run plants on the host, and what each canary saw: checked on the host itself.

- a key in root's user keyring, as a trial of an earlier run would have left it there: no trial
  may read it (the kernel keyring is one for every process of uid 0 on the host);
- a TCP service on 0.0.0.0, which records every connection it accepts: no trial may reach it, at
  any of the host's addresses;
- an HTTP proxy that wants a credential, named with it in the harness's HTTPS_PROXY: the relay
  must reach it with the credential, and no trial may hold the credential in any encoding.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import os
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ADD_KEY, KEYCTL, KEYCTL_INVALIDATE, USER_KEYRING = 248, 250, 21, -4  # x86-64, keyutils.h
KEY_PREFIX = "levelfield-hostile"
# the host's own keys: this run's, and those of hostile runs in flight beside it
CANARY_PREFIX = f"{KEY_PREFIX}-canary-"


@dataclass
class HostCanaries:
    key_desc: str
    key_id: int
    proxy_user: str
    proxy_secret: str
    reached: list[str] = field(default_factory=list)  # who the host service answered
    proxied: list[tuple[bool, str]] = field(default_factory=list)  # (credential right, line)
    host_keys: list[str] = field(default_factory=list)  # /proc/keys lines of ours, after
    _sockets: list[socket.socket] = field(default_factory=list)

    @classmethod
    def start(cls) -> HostCanaries:
        tag = uuid.uuid4().hex[:12]
        desc = f"{CANARY_PREFIX}{tag}"
        found = cls(desc, _add_user_key(desc, b"42"), f"lfuser{tag}", f"lf-proxy-pw-{tag}")
        found._serve(found._service, "HOST-SERVICE")
        found._serve(found._proxy, "proxy")
        return found

    @property
    def service_port(self) -> int:
        return int(self._sockets[0].getsockname()[1])

    @property
    def environ(self) -> dict[str, str]:
        """The harness's proxy variables: the credential in the URL, as users write it."""
        port = self._sockets[1].getsockname()[1]
        url = f"http://{self.proxy_user}:{self.proxy_secret}@127.0.0.1:{port}/"
        return {"HTTPS_PROXY": url, "HTTP_PROXY": url, "NO_PROXY": "localhost"}

    def places(self) -> dict[str, str]:
        return {
            "HOST_ADDRS": " ".join(host_addresses()),
            "HOST_PORT": str(self.service_port),
            "KEY_DESC": self.key_desc,
        }

    def settle(self) -> None:
        """What the host's keyring holds of ours once the run is over."""
        with contextlib.suppress(OSError):
            lines = Path("/proc/keys").read_text().splitlines()
            self.host_keys = [line for line in lines if KEY_PREFIX in line]

    def stop(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        _libc().syscall(KEYCTL, KEYCTL_INVALIDATE, self.key_id)

    def _serve(self, handle: object, name: str) -> None:
        host = "0.0.0.0" if name == "HOST-SERVICE" else "127.0.0.1"
        sock = socket.create_server((host, 0), backlog=64)
        self._sockets.append(sock)

        def loop() -> None:
            while True:
                try:
                    conn, peer = sock.accept()
                except OSError:
                    return
                with conn:
                    handle(conn, peer)  # type: ignore[operator]

        threading.Thread(target=loop, name=f"canary-{name}", daemon=True).start()

    def _service(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        self.reached.append(peer[0])
        with contextlib.suppress(OSError):
            conn.sendall(b"HOST-SERVICE\n")

    def _proxy(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        conn.settimeout(10)
        head = b""
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                head += chunk
        credential = f"{self.proxy_user}:{self.proxy_secret}".encode()
        expected = b"Proxy-Authorization: Basic " + base64.b64encode(credential)
        right = expected in head
        self.proxied.append((right, head.split(b"\r\n", 1)[0].decode(errors="replace")))
        answer = b"200 Connection established\r\n\r\nUPSTREAM-OK\n" if right else b"407 No\r\n\r\n"
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.1 " + answer)


def host_addresses() -> list[str]:
    """Every IPv4 address of the host but loopback: its own, its engines' bridges, the host ends
    of the trial links in flight."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True)
    found = []
    for line in out.stdout.splitlines():
        parts = line.split()
        address = parts[parts.index("inet") + 1].split("/")[0] if "inet" in parts else ""
        if address and not address.startswith("127."):
            found.append(address)
    return found


def encodings(secret: str) -> list[bytes]:
    """The secret as an agent would smuggle it past masking: plain, reversed, and what its base64
    holds at each of the three alignments a stream may give it."""
    raw = secret.encode()
    found = [raw, raw[::-1]]
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw)
        found.append(encoded[4 if pad else 0 : -4])  # the characters only the secret decides
    return found


def files_under(root: Path) -> Iterator[Path]:
    """Regular files below `root`, never through a link, without recursion (the run holds the
    agent's 1,100 nested folders, copied)."""
    stack = [os.fspath(root)]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    yield Path(entry.path)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _add_user_key(desc: str, payload: bytes) -> int:
    key = _libc().syscall(ADD_KEY, b"user", desc.encode(), payload, len(payload), USER_KEYRING)
    if key < 0:
        raise OSError(ctypes.get_errno(), "add_key into root's user keyring")
    return int(key)
