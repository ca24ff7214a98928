"""Room in the run directory: a run stops, with a clear error, when its filesystem fills.

A full run directory is the harness's problem, never a trial's: the trial's disk image (sparse,
inside its trial directory) cannot grow, its logs and record cannot be written, and SQLite cannot
commit. Booking those trials as failures would put the harness's disk into the score. So the
executor checks the room left before a trial starts, while trials run, and before it commits a
record; below MIN_FREE_BYTES it raises `RunDirFull`: trials in flight are discarded (they rerun on
resume, as after Ctrl-C), finished ones are already committed, and SQLite's transactions keep the
store whole. Free space, run the same command, and the run resumes.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from levelfield.errors import RunDirFull

# A record is a few KiB, a trial directory's logs tens of KiB, SQLite's WAL grows by pages:
# 8 MiB leaves room for the trials in flight to be closed and the store to be left whole.
MIN_FREE_BYTES = 8 << 20


def free_bytes(run_dir: Path) -> int:
    """Bytes this process may still write on the run directory's filesystem (root included:
    the harness runs as root, so the reserved blocks count as room)."""
    st = os.statvfs(run_dir)
    available = st.f_bfree if os.geteuid() == 0 else st.f_bavail
    return int(available * st.f_frsize)


def check_room(run_dir: Path) -> None:
    """Raise RunDirFull when fewer than MIN_FREE_BYTES are left; an unreadable filesystem is
    left to the writes themselves to report."""
    try:
        free = free_bytes(run_dir)
    except OSError:
        return
    if free < MIN_FREE_BYTES:
        raise run_dir_full(run_dir, free)


def run_dir_full(run_dir: Path, free: int | None = None) -> RunDirFull:
    if free is None:
        try:
            free = free_bytes(run_dir)
        except OSError:
            free = 0
    return RunDirFull(
        f"the run directory {run_dir} is full ({free >> 20} MiB free; a run needs "
        f"{MIN_FREE_BYTES >> 20} MiB): the run stopped, finished trials are stored and the "
        "ones in flight were discarded. Free space, then run the same command to resume"
    )


def is_disk_full(exc: BaseException | None) -> bool:
    """ENOSPC (or SQLite's SQLITE_FULL) anywhere along the exception's causes."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RunDirFull):
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(exc, sqlite3.OperationalError) and (
            getattr(exc, "sqlite_errorname", "") == "SQLITE_FULL" or "disk is full" in str(exc)
        ):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
