"""What an exec leaves behind, read the same way by every backend: the tail of its output and
the signal behind its exit code.

A phase's commands append to one log file, so the tail starts no earlier than where this exec
began writing: the terminal agent shows the model each command's own output, not its
predecessors'. The output reaches that file through a masking writer (`LogPump`, or the oci
stream's own), never straight from the sandbox.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from pathlib import Path

from levelfield.masking import Masker
from levelfield.sandbox._logcap import LogCaps

OUTPUT_TAIL_BYTES = 2000
PIPE_READ_BYTES = 64 << 10
DRAIN_S = 0.5  # output still in the pipe when the phase's main process ends (as oci's drain)
CLOSE_S = 5.0  # a sandbox's last writers are killed before its pumps are closed


def log_size(path: Path) -> int:
    """Where the next exec's output will begin in the shared log."""
    return path.stat().st_size if path.exists() else 0


def tail(path: Path, *, offset: int = 0, max_bytes: int = OUTPUT_TAIL_BYTES) -> str:
    """The last `max_bytes` written to `path` since `offset`; empty when unreadable."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(offset, path.stat().st_size - max_bytes))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def signal_of(exit_code: int | None) -> int | None:
    """Shell convention: 128 + N is a death by signal N (as bash and container engines report)."""
    if exit_code is None:
        return None
    return exit_code - 128 if 128 < exit_code < 160 else None


def wait_or_kill(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Wait for a phase started in its own session; at the timeout kill its whole process group.
    True if it timed out."""
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return True


def shell_exit_code(returncode: int) -> int:
    """Shell convention: a death by signal N reads as 128 + N, as inside a container."""
    return 128 - returncode if returncode < 0 else returncode


def signal_of_returncode(returncode: int) -> int | None:
    """Popen reports a death by signal N as -N; a shell inside may have reported 128 + N."""
    return -returncode if returncode < 0 else signal_of(returncode)


class LogPump:
    """Copies a phase's output from a pipe into its log through a masking writer, so that no
    secret reaches the disk even for an instant (a run killed with SIGKILL leaves the log as it
    was written: masked), and within the log's cap (`_logcap.py`). Processes the phase leaves
    running in the background keep the pipe open, and their output keeps reaching the log until
    they end, as it would with the log file as their stdout; `close()` waits for that once the
    sandbox's processes are gone."""

    def __init__(
        self, read_fd: int, log_path: Path, masker: Masker, caps: LogCaps | None = None
    ) -> None:
        self._fd = read_fd
        self._log = (caps or LogCaps()).open(log_path)  # the pump closes it at the pipe's end
        self._writer = masker.writer(self._log)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._pump, name="levelfield-log", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            while chunk := os.read(self._fd, PIPE_READ_BYTES):
                self._writer.write(chunk)
                self._writer.flush()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError, ValueError):
                self._writer.close()
            self._log.close()
            os.close(self._fd)
            self._done.set()

    def drain(self, timeout_s: float = DRAIN_S) -> bool:
        """Wait for the output still in the pipe after the phase's main process ended; True when
        the pipe reached its end (no background process holds it)."""
        return self._done.wait(timeout_s)

    def close(self, timeout_s: float = CLOSE_S) -> None:
        self._thread.join(timeout_s)
