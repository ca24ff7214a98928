"""The grader's witness: the kernel names every process that opens or writes the grader's files.

The grader's paths (/tests, its /logs/verifier, its HOME and TMPDIR) live on a filesystem of
their own (`_grader.GraderDisk`), and while the grader runs a fanotify group watches that whole
filesystem (FAN_MARK_FILESYSTEM: every mount of it, in every mount namespace). Opens are
*permission* events: the opener waits until the witness answers, so it is still alive to be
named, and an open by a process that is not the grader's is refused (EPERM) as well as recorded.
Writes through a descriptor opened before are notifications (FAN_MODIFY), named when the writer
is still there to be read.

Whose a process is comes from the kernel, not from anything the sandbox can say: a grader's
process descends from the grader's bubblewrap (its parent chain in /proc, read on the host while
the opener is held), or is the harness itself. Any other process is refused. One that runs in the
agent's sandbox (its PID namespace) is an intruder: the agent reached the grader's files, and the
trial is `grader_tampered` with its command line. One that does not (a host's backup or search
walking the run directory, a VM sharing the host's files) is not the agent's doing: it is named
in the trial's notes and the verdict stands. The namespaces already keep the agent's processes
away from these files; the witness is what holds when they would not (`tests/hostile`), and it
does not trust them to.

If the witness thread ever fails, the group is closed, which allows every pending open: the
grader is never left hanging on the harness.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path

# <sys/fanotify.h>
FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_CLASS_CONTENT = 0x4
FAN_UNLIMITED_QUEUE = 0x10
FAN_MARK_ADD = 0x1
FAN_MARK_FILESYSTEM = 0x100
FAN_MODIFY = 0x2
FAN_Q_OVERFLOW = 0x4000
FAN_OPEN_PERM = 0x10000
FAN_ALLOW = 0x1
FAN_DENY = 0x2
FAN_NOFD = -1
AT_FDCWD = -100
_METADATA = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
_RESPONSE = struct.Struct("iI")  # fd, response
READ_BYTES = 64 << 10
COMMAND_CHARS = 300  # of an intruder's command line, kept as evidence
INTRUDERS_KEPT = 20  # distinct intruding processes named; more are counted


@dataclass
class Intrusion:
    pid: int
    command: str
    paths: list[str] = field(default_factory=list)
    refused: int = 0  # opens refused
    writes: int = 0  # writes through a descriptor it already held

    def describe(self) -> str:
        what = []
        if self.refused:
            what.append(f"{self.refused} open(s) refused")
        if self.writes:
            what.append(f"{self.writes} write(s)")
        shown = ", ".join(self.paths[:5]) + (" ..." if len(self.paths) > 5 else "")
        return f"pid {self.pid} ({self.command}) touched {shown}: {', '.join(what)}"


class WitnessUnavailable(OSError):
    """fanotify is not offered here (an old kernel, no CAP_SYS_ADMIN): the grader runs without
    its witness, and the trial's notes say so."""


class Witness:
    """Watches one filesystem while `allow` holds the grader's root pid (its bubblewrap)."""

    def __init__(
        self, mount_point: Path, names: dict[str, str] | None = None, agents: Path | None = None
    ) -> None:
        self.mount_point = mount_point
        self.names = names or {}  # a folder of the filesystem → the path the grader knows it by
        # /proc/PID/ns/pid of the agent's sandbox: a process in it is the agent's (unknown: all are)
        self._agents = _namespace(agents) if agents is not None else None
        self._outsiders: dict[int, Intrusion] = {}
        self._fd = -1
        self._thread: threading.Thread | None = None
        self._grader_pids: set[int] = set()
        self._own = os.getpid()
        self._known: dict[tuple[int, str], bool] = {}  # (pid, start time) → the grader's?
        self._intruders: dict[int, Intrusion] = {}
        self._overflowed = False
        self._failure: str | None = None
        self._lock = threading.Lock()
        self.events = 0

    def start(self) -> None:
        libc = _libc()
        fd = libc.fanotify_init(
            FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE,
            os.O_RDONLY | os.O_LARGEFILE,
        )
        if fd < 0:
            raise WitnessUnavailable(ctypes.get_errno(), "fanotify_init refused")
        mask = FAN_OPEN_PERM | FAN_MODIFY
        path = os.fsencode(self.mount_point)
        if libc.fanotify_mark(fd, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, mask, AT_FDCWD, path) < 0:
            err = ctypes.get_errno()
            os.close(fd)
            raise WitnessUnavailable(err, f"fanotify_mark on {self.mount_point} refused")
        self._fd = fd
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="grader-witness", daemon=True)
        self._thread.start()

    def allow(self, pid: int) -> None:
        """The grader's root process (on the host): it and every process it starts are the
        grader's."""
        with self._lock:
            self._grader_pids.add(pid)

    def stop(self) -> None:
        """Close the group: pending opens are allowed, and no event is read after this."""
        if self._thread is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake[1], b"x")
            self._thread.join(timeout=5)
            for end in self._wake:
                os.close(end)
            self._thread = None
        self._close_group()

    def _close_group(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def intrusions(self) -> list[str]:
        return self._named(self._intruders)

    def notes(self) -> list[str]:
        notes = [
            "refused, not the agent's (it does not run in the sandbox): " + line
            for line in self._named(self._outsiders)
        ]
        if self._overflowed:
            notes.append("the grader's witness lost events (its queue overflowed)")
        if self._failure:
            notes.append(f"the grader's witness stopped early: {self._failure}")
        return notes

    def _named(self, kept: dict[int, Intrusion]) -> list[str]:
        """The first INTRUDERS_KEPT processes described, the rest counted."""
        with self._lock:
            found = [i.describe() for i in kept.values()]
        shown = found[:INTRUDERS_KEPT]
        if len(found) > INTRUDERS_KEPT:
            shown.append(f"and {len(found) - INTRUDERS_KEPT} more processes")
        return shown

    # -- the thread ------------------------------------------------------------------------

    def _serve(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake[0] in ready:
                    return
                try:
                    data = os.read(self._fd, READ_BYTES)
                except OSError as exc:
                    if exc.errno in (errno.EINTR, errno.EAGAIN):
                        continue
                    raise
                self._handle(data)
        except Exception as exc:  # never leave an opener waiting on a dead witness
            self._failure = f"{type(exc).__name__}: {exc}"
            self._close_group()

    def _handle(self, data: bytes) -> None:
        offset = 0
        while offset + _METADATA.size <= len(data):
            length, _, _, _, mask, event_fd, pid = _METADATA.unpack_from(data, offset)
            offset += max(length, _METADATA.size)
            self.events += 1
            if mask & FAN_Q_OVERFLOW:
                self._overflowed = True
                continue
            try:
                self._judge(mask, event_fd, pid)
            finally:
                if event_fd >= 0:
                    os.close(event_fd)

    def _judge(self, mask: int, event_fd: int, pid: int) -> None:
        """An intruder is named while it still waits on the answer, then refused."""
        theirs = self._is_graders(pid)
        if theirs is False:
            self._record(mask, event_fd, pid, self._is_agents(pid))
        if mask & FAN_OPEN_PERM:
            answer = FAN_ALLOW if theirs is not False else FAN_DENY
            with contextlib.suppress(OSError):
                os.write(self._fd, _RESPONSE.pack(event_fd, answer))

    def _record(self, mask: int, event_fd: int, pid: int, agents: bool) -> None:
        path = _path_of(event_fd, self.mount_point, self.names)
        with self._lock:
            kept = self._intruders if agents else self._outsiders
            found = kept.get(pid)
            if found is None:
                found = kept.setdefault(pid, Intrusion(pid, _command_of(pid)))
            if path and path not in found.paths:
                found.paths.append(path)
            if mask & FAN_OPEN_PERM:
                found.refused += 1
            if mask & FAN_MODIFY:
                found.writes += 1

    def _is_graders(self, pid: int) -> bool | None:
        """True for the harness and the grader's processes, False for any other process, None
        for one gone before it could be read (a write notification from a process that exited:
        an opener is held, so it is always there)."""
        if pid == self._own:
            return True
        start = _start_time(pid)
        if start is None:
            return None
        key = (pid, start)
        known = self._known.get(key)
        if known is None:
            known = self._descends_from_grader(pid)
            if known is not None:
                self._known[key] = known
        return known

    def _is_agents(self, pid: int) -> bool:
        """Whether a process not the grader's runs in the agent's sandbox: its PID namespace,
        which nothing in there can leave (no new namespaces under the seccomp profile)."""
        if self._agents is None:
            return True
        return _namespace(Path(f"/proc/{pid}/ns/pid")) == self._agents

    def _descends_from_grader(self, pid: int) -> bool | None:
        with self._lock:
            roots = set(self._grader_pids)
        seen = 0
        while pid > 1 and seen < 4096:
            if pid in roots:
                return True
            parent = _parent_of(pid)
            if parent is None:
                return None
            pid, seen = parent, seen + 1
        return False


_LIBC: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _LIBC
    if _LIBC is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
        libc.fanotify_init.restype = ctypes.c_int
        libc.fanotify_mark.argtypes = [
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint64,
            ctypes.c_int,
            ctypes.c_char_p,
        ]
        libc.fanotify_mark.restype = ctypes.c_int
        _LIBC = libc
    return _LIBC


def _namespace(link: Path) -> str | None:
    try:
        return os.readlink(link)
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name (which may hold spaces and parentheses)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode(errors="replace").split()


def _parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def _start_time(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[19] if fields and len(fields) > 19 else None


def _command_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "gone"
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    return text[:COMMAND_CHARS] or "?"


def _path_of(event_fd: int, mount_point: Path, names: dict[str, str]) -> str:
    """The touched path, as the grader knows it (/tests/test.sh, not the disk's tests/test.sh)."""
    if event_fd < 0:
        return ""
    try:
        target = os.readlink(f"/proc/self/fd/{event_fd}")
    except OSError:
        return ""
    prefix = str(mount_point).rstrip("/") + "/"
    if not target.startswith(prefix):
        return target
    top, _, rest = target[len(prefix) :].partition("/")
    named = names.get(top)
    return f"{named}/{rest}" if named else f"/{top}/{rest}"
