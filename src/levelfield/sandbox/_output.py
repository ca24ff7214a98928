"""What an exec leaves behind, read the same way by every backend: the tail of its output and
the signal behind its exit code.

A phase's commands append to one log file, so the tail starts no earlier than where this exec
began writing: the terminal agent shows the model each command's own output, not its
predecessors'.
"""

from __future__ import annotations

from pathlib import Path

OUTPUT_TAIL_BYTES = 2000


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
