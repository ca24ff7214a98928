"""Who moved the grader's mount points: a watch on the top of a container's root while grading.

The oci grader's root is the container's own filesystem, one mount (a test that renames a file
from /app to /tmp must not meet EXDEV), with the grader's /etc, /tests, /logs, /run and kin
mounted on the container's own top-level folders. Those folders stay the agent's to rename: a
process it left running that moved /tests aside and made a /tests of its own would hand the
grader its own tests, since a mount follows the folder it sits on, and a name made anew is no
mount. No option of a mount forbids that, so the kernel is asked to tell (inotify, read by the
harness, outside the agent's reach): any entry of those names made, moved or removed at the top
of the container's root while the grader ran is an intrusion. The grader cannot do it itself:
in its own namespace each of them is a mount point (EBUSY), and the harness made them before the
watch began.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct
from collections.abc import Iterable
from pathlib import Path

IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_Q_OVERFLOW = 0x4000
WATCHED = IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
WHAT = {IN_MOVED_FROM: "moved away", IN_MOVED_TO: "moved in", IN_CREATE: "made",
        IN_DELETE: "removed"}  # fmt: skip


class TopWatch:
    """Started before the grader's namespaces form, read when it ends."""

    def __init__(self, root: Path, names: Iterable[str], folders: Iterable[str]) -> None:
        self.root, self.names, self.folders = root, frozenset(names), sorted(folders)
        self._fd = -1
        self.unavailable: str | None = None
        self._gone: list[str] = []

    def start(self) -> None:
        """The watch, then a look: each of `folders` is still a folder (the harness checked it
        when the view was made; what changed it since is the agent's)."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0 or libc.inotify_add_watch(fd, str(self.root).encode(), WATCHED) < 0:
            self.unavailable = os.strerror(ctypes.get_errno())
            if fd >= 0:
                os.close(fd)
            return
        self._fd = fd
        for name in self.folders:
            try:
                folder = stat.S_ISDIR(os.lstat(self.root / name).st_mode)
            except OSError:
                folder = False
            if not folder:
                self._gone.append(f"/{name} is no longer a folder as the grader starts")

    def stop(self) -> list[str]:
        """What happened to the watched names since start, in order; the watch is closed."""
        if self._fd < 0:
            return []
        seen, self._gone = self._gone, []
        try:
            while True:
                try:
                    data = os.read(self._fd, 64 << 10)
                except BlockingIOError:
                    break
                seen += self._events(data)
        finally:
            os.close(self._fd)
            self._fd = -1
        return seen

    def _events(self, data: bytes) -> list[str]:
        seen, at = [], 0
        while at + HEADER.size <= len(data):
            _, mask, _, length = HEADER.unpack_from(data, at)
            name = data[at + HEADER.size : at + HEADER.size + length].split(b"\0", 1)[0]
            at += HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                seen.append("more changes at the top of the container's root than were counted")
                continue
            text = name.decode(errors="replace")
            if text in self.names:
                what = next((w for bit, w in WHAT.items() if mask & bit), "changed")
                seen.append(f"/{text} {what} at the top of the container's root")
        return seen
