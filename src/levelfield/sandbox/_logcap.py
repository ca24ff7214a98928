"""What a trial prints costs the harness at most LOG_MAX_BYTES of disk per log, and no memory.

An agent may print without end (`head -c 2G /dev/zero`: its disk ceiling does not cover its
output, which the harness writes on the host). Each log a sandbox writes (agent.log,
verifier.log, agent-setup.log, sandbox.log) keeps its first and its last bytes, and what lies
between is cut, with a line in the log where the cut is and a note in the trial's evidence. The
start says what the agent set out to do, the end how it ended (a CLI agent's final report, the
last error); the middle of a flood is the flood.

Every exec's output is a stream through one `CappedSink`, below the masking writer (only masked
bytes reach it, so a cut can never leave half a secret in the clear). The first bytes go
straight to the log; past them, the stream goes into a ring of the tail's size in a file beside
the log, masked as the log is, and memory stays at one read; when the stream ends, the cut's
line and the ring, in order, follow the head. A log shared by several execs has one budget:
each exec reserves what it may keep from what its log has left, and gives back what it did not
use, so a log never keeps more than LOG_MAX_BYTES, save the last MIN_TAIL_BYTES of each exec
that came after it was full (a command's own output, which the terminal agent shows its model).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

# The default, for every log of every trial: a CLI agent's whole stream-json report of a long
# session is a few MiB; an agent that prints more is cut in the middle.
LOG_MAX_BYTES = 32 << 20
MIN_TAIL_BYTES = 64 << 10
CHUNK = 1 << 20


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


@dataclass
class _Kept:
    """One log's account: what its execs printed, and what it keeps."""

    reserved: int = 0
    printed: int = 0
    cut: int = 0


@dataclass
class LogCaps:
    """The logs of one sandbox and their budgets, for every exec that writes one."""

    max_bytes: int = LOG_MAX_BYTES
    _logs: dict[Path, _Kept] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def open(self, path: Path) -> CappedSink:
        """A sink appending to `path` within what the log has left."""
        with self._lock:
            kept = self._logs.setdefault(path, _Kept())
            left = max(0, self.max_bytes - kept.reserved)
            head = left // 2
            tail = max(min(MIN_TAIL_BYTES, self.max_bytes // 2), left - head)
            kept.reserved += head + tail
        return CappedSink(self, path, head, tail)

    def _settle(self, path: Path, unused: int, printed: int, cut: int) -> None:
        with self._lock:
            kept = self._logs[path]
            kept.reserved -= unused
            kept.printed += printed
            kept.cut += cut

    def notes(self) -> list[str]:
        """For the trial's evidence: every log that was cut, and by how much."""
        with self._lock:
            cut = {p: k for p, k in self._logs.items() if k.cut}
        return [
            f"{path.name} cut: {kept.printed} bytes printed, {_mib(kept.cut)} cut from the "
            f"middle (each log keeps at most {_mib(self.max_bytes)}: its first and last bytes)"
            for path, kept in sorted(cut.items())
        ]


class CappedSink:
    """A binary sink: the first `head` bytes to the log, the last `tail` kept in a ring beside
    it, the rest counted. `close()` writes the cut's line and the ring into the log."""

    def __init__(self, caps: LogCaps, path: Path, head: int, tail: int) -> None:
        self.caps, self.path = caps, path
        self.head_left, self.tail_size = head, tail
        self._head_size = head
        self._log = open(path, "ab")  # noqa: SIM115  (closed by close())
        self._ring: int | None = None  # the ring's descriptor, once the head is full
        self._ring_path = path.with_name(f"{path.name}.tail-{os.getpid()}-{id(self):x}")
        self._ring_pos = 0  # bytes written to the ring in all (its start is pos % size)
        self.printed = 0
        self._closed = False

    def write(self, data: bytes) -> int:
        given = len(data)
        self.printed += given
        if self.head_left > 0:
            into_head = data[: self.head_left]
            self._log.write(into_head)
            self.head_left -= len(into_head)
            data = data[len(into_head) :]
        if data:
            self._to_ring(data)
        return given

    def _to_ring(self, data: bytes) -> None:
        if self._ring is None:
            self._log.flush()
            flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
            self._ring = os.open(self._ring_path, flags, 0o600)
        size = self.tail_size
        view = memoryview(data)[-size:]  # older bytes would be overwritten at once
        self._ring_pos += len(data) - len(view)
        while view:
            at = self._ring_pos % size
            n = os.pwrite(self._ring, view[: size - at], at)
            self._ring_pos += n
            view = view[n:]

    def flush(self) -> None:
        self._log.flush()

    def close(self) -> None:
        """The cut's line and the ring after the head; the budget's unused part given back."""
        if self._closed:
            return
        self._closed = True
        kept_tail = min(self._ring_pos, self.tail_size)
        cut = self._ring_pos - kept_tail
        try:
            if self._ring is not None:
                if cut:
                    self._log.write(
                        f"\n[levelfield: {cut} bytes cut here: this log keeps its first "
                        f"{_mib(self._head_size)} and its last {_mib(self.tail_size)}]\n".encode()
                    )
                self._copy_ring(kept_tail)
        finally:
            self._log.close()
            if self._ring is not None:
                os.close(self._ring)
                self._ring_path.unlink(missing_ok=True)
        used = (self._head_size - self.head_left) + kept_tail
        self.caps._settle(self.path, self._head_size + self.tail_size - used, self.printed, cut)

    def _copy_ring(self, kept: int) -> None:
        assert self._ring is not None
        start = self._ring_pos % self.tail_size if self._ring_pos > self.tail_size else 0
        for offset, length in ((start, kept - start), (0, start)) if start else ((0, kept),):
            done = 0
            while done < length:
                chunk = os.pread(self._ring, min(CHUNK, length - done), offset + done)
                if not chunk:
                    break
                self._log.write(chunk)
                done += len(chunk)
