"""A trial's directory scrubbed of every known secret before the trial is done, in bounded memory.

The logs were masked as they were written; what the sandbox left under /logs was copied as it
was, and may hold a secret the agent printed there (`masking.py` says which values). Each
regular file is read in chunks through a masking writer that only watches (`changed`); a file
that held a secret is then rewritten through another, into a file beside it that replaces it.
Memory stays at one chunk whatever the file's size, and only a file's data is read: a sparse
file's holes hold no secret, and a rewrite keeps them holes. The walk is `_walk.walk`: no
recursion, one descriptor, never through a link.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from levelfield.masking import Masker
from levelfield.sandbox import _walk, trees

CHUNK = 1 << 20
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def mask_files(root: Path, masker: Masker) -> int:
    """Rewrite every regular file under `root` that holds a secret; returns how many. Never
    raises for what it finds: a file it cannot read is left as it is."""
    try:
        top = os.open(root, _walk.DIR_FLAGS)
    except OSError:
        return 0
    changed = 0
    try:
        for _, st, dir_fd, name in _walk.walk(top):
            if stat.S_ISREG(st.st_mode):
                changed += _mask_file(dir_fd, name, st.st_size, masker)
    except _walk.TreeChanged:
        pass  # the harness's own directory: nothing moves it
    finally:
        os.close(top)
    return changed


def _mask_file(dir_fd: int, name: str, size: int, masker: Masker) -> int:
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        if not _holds_secret(fd, size, masker):
            return 0
        partial = f".levelfield-masking-{os.getpid()}"  # short: `name` may be 255 bytes
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        out_fd = os.open(partial, flags, 0o644, dir_fd=dir_fd)
        with os.fdopen(out_fd, "wb") as out:
            _rewrite(fd, size, masker, out)
        os.replace(partial, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return 1
    except OSError:
        return 0
    finally:
        os.close(fd)


def _holds_secret(fd: int, size: int, masker: Masker) -> bool:
    for start, end in trees.data_segments(fd, size):
        writer = masker.writer(io.BytesIO())
        for chunk in _chunks(fd, start, end):
            writer.write(chunk)
            writer.sink.seek(0)
            writer.sink.truncate()  # what it would write is not kept: only whether it changed
        writer.close()
        if writer.changed:
            return True
    return False


def _rewrite(fd: int, size: int, masker: Masker, out: BinaryIO) -> None:
    """Each data segment masked, each hole a hole of the same length."""
    at = 0
    for start, end in trees.data_segments(fd, size):
        out.seek(out.tell() + start - at)
        writer = masker.writer(out)
        for chunk in _chunks(fd, start, end):
            writer.write(chunk)
        writer.close()
        at = end
    out.truncate(out.tell() + size - at)


def _chunks(fd: int, start: int, end: int) -> Iterator[bytes]:
    at = start
    while at < end and (chunk := os.pread(fd, min(CHUNK, end - at), at)):
        yield chunk
        at += len(chunk)
