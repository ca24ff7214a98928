"""What the agent left running when its phase ended, read on the host from /proc.

A task may ask for a service left running (a server the grader queries), so nothing is killed
before grading: the processes keep running beside the grader (which cannot see them, nor they
it) and are gone with the sandbox. They are listed in the evidence, each with its command line
and what it listens on, since a reader of a pass should know what else was there when the
grader ran.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

LISTED_MAX = 20  # processes named in the evidence; more are counted
COMMAND_CHARS = 200
TCP_LISTEN = "0A"  # /proc/net/tcp's st for LISTEN
UNIX_ACCEPTING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's flags
KEEPALIVE_SLEEP = "sleep 3600"  # what every sandbox's idle init waits on (_bwrap.INIT, oci)


def left_running(pids: Iterable[int], *, net_pid: int | None, init: int) -> tuple[str, ...]:
    """One line per process: its pid inside the sandbox, its command line, its listeners. The
    sandbox's own init and its idle `sleep` are not the agent's."""
    listeners = _listeners(net_pid) if net_pid else {}
    sandbox = _pid_namespace(init)
    lines = []
    for pid in sorted(set(pids) - {init}):
        if _pid_namespace(pid) != sandbox:  # the harness's own (bubblewrap's outer process)
            continue
        command = _command(pid)
        if command is None or (command == KEEPALIVE_SLEEP and _parent(pid) == init):
            continue
        heard = sorted({listeners[i] for i in _socket_inodes(pid) if i in listeners})
        listens = f", listening on {', '.join(heard)}" if heard else ""
        lines.append(f"pid {_inner_pid(pid)}: {command}{listens}")
    if len(lines) > LISTED_MAX:
        rest = len(lines) - LISTED_MAX
        lines = [*lines[:LISTED_MAX], f"and {rest} more processes"]
    return tuple(lines)


def _command(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    if not text:  # a kernel thread or a zombie: its name instead
        try:
            text = "[" + Path(f"/proc/{pid}/comm").read_text().strip() + "]"
        except OSError:
            return None
    return text[:COMMAND_CHARS]


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _parent(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(raw[raw.rfind(b")") + 2 :].split()[1])


def _inner_pid(pid: int) -> int:
    """The pid the sandbox itself sees (the last NSpid), the number its own `ps` shows."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return pid


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def _listeners(net_pid: int) -> dict[str, str]:
    """Listening sockets of the sandbox's network namespace: inode → 'tcp 0.0.0.0:8000'."""
    found: dict[str, str] = {}
    for proto in ("tcp", "tcp6"):
        try:
            rows = Path(f"/proc/{net_pid}/net/{proto}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == TCP_LISTEN:
                found[cols[9]] = f"{proto} {_address(cols[1])}"
    try:
        rows = Path(f"/proc/{net_pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        rows = []
    for row in rows:
        cols = row.split()
        if len(cols) > 6 and int(cols[3], 16) & UNIX_ACCEPTING:
            found[cols[6]] = f"unix {cols[7] if len(cols) > 7 else '(unnamed)'}"
    return found


def _address(hex_address: str) -> str:
    """/proc/net/tcp's 0100007F:1F90 → 127.0.0.1:8080 (IPv6 shown as its hex, with the port)."""
    host, port = hex_address.split(":")
    if len(host) == 8:
        ip = ".".join(str(int(host[i : i + 2], 16)) for i in (6, 4, 2, 0))
    else:
        ip = "[::]" if set(host) == {"0"} else f"[{host.lower()}]"
    return f"{ip}:{int(port, 16)}"


class AgentCpu:
    """CPU time the agent's processes took while the grader ran, sampled from /proc.

    The grader joins the trial's cgroup, so what the agent left running shares its CPU ceiling:
    a leftover spinning busy loops can make the grader time out. That timeout is the agent's
    doing, and this is its evidence, read outside the agent's reach. A process is the agent's
    when it is in the trial's cgroup and in the sandbox's PID namespace (the grader has its
    own). Each is counted from its first reading (or from zero when it started during grading)
    to its last, children it reaped included; one that lived between two readings is counted
    in its parent's children's time once reaped.
    """

    INTERVAL_S = 0.25

    def __init__(self, cgroup_procs: Iterable[Path], namespace: Path | None) -> None:
        self._procs = list(cgroup_procs)
        self._namespace = _readlink(namespace) if namespace else None
        self._first: dict[tuple[int, int], int] = {}
        self._last: dict[tuple[int, int], int] = {}
        self._others_first: dict[tuple[int, int], int] = {}  # the grader's, in the same cgroup
        self._others_last: dict[tuple[int, int], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        self._ticks = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> AgentCpu:
        if self._namespace is not None:
            self._sample(first=True)
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self._sample(first=False)

    @property
    def seconds(self) -> float:
        return self._used(self._first, self._last)

    @property
    def others_seconds(self) -> float:
        """What the cgroup's other processes (the grader's own) took meanwhile."""
        return self._used(self._others_first, self._others_last)

    def _used(self, first: dict[tuple[int, int], int], last: dict[tuple[int, int], int]) -> float:
        return sum(ticks - first.get(key, 0) for key, ticks in last.items()) / self._ticks

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            self._sample(first=False)

    def _sample(self, *, first: bool) -> None:
        for pid in self._pids():
            agents = _pid_namespace(pid) == self._namespace
            reading = _cpu_ticks(pid)
            if reading is None:
                continue
            key, ticks = reading
            if first:
                (self._first if agents else self._others_first)[key] = ticks
            (self._last if agents else self._others_last)[key] = ticks

    def _pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self._procs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in procs.read_text().split())
        return found


def _cpu_ticks(pid: int) -> tuple[tuple[int, int], int] | None:
    """((pid, start time), utime + stime + cutime + cstime) in clock ticks: the start time
    keeps a reused pid apart."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    # after the command: state is field 3 of stat(5); utime..cstime 14-17, starttime 22
    return (pid, int(fields[19])), sum(int(f) for f in fields[11:15])


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
