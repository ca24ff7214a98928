"""An engine's archive of a path in a container, read by `trees`' rules: what the path itself
is comes from the engine's stat of it (Podman archives a link's target, Docker the link), links
are unpacked as links and nothing is written through one, FIFOs, sockets and devices are listed
instead of made.

Bounded: an engine's archive holds a sparse file's holes as zeros, so the archive is spooled
sparse (a run of zeros is a hole in the spool too) and at most SPOOL_MAX_BYTES of it is read;
files are unpacked sparse, and only their data counts against the copy's budget.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from levelfield.sandbox import trees

# What one archive may stream at most: a sparse file of terabytes streams as terabytes of zeros.
# Past it, the archive ends where it was cut, and its last member is listed as not copied.
SPOOL_MAX_BYTES = 2 << 30

# Go's os.FileMode type bits, as the engines' path stat (X-Docker-Container-Path-Stat) gives them
_GO_KINDS = (
    (1 << 31, "directory"),
    (1 << 27, "symlink"),
    (1 << 25, "fifo"),
    (1 << 24, "socket"),
    (1 << 26, "device"),
    (1 << 19, "device"),
)


def stat_kind(mode: int) -> str:
    return next((kind for bit, kind in _GO_KINDS if mode & bit), "file")


def member_kind(member: tarfile.TarInfo) -> str:
    if member.isreg() or member.islnk():
        return "file"
    if member.isdir():
        return "directory"
    if member.issym():
        return "symlink"
    if member.isfifo():
        return "fifo"
    if member.isdev():
        return "device"
    return "socket"


def entry(tar: tarfile.TarFile, *, max_bytes: int) -> trees.Entry:
    """The archive's first member, which the engine names after the path asked for."""
    member = tar.next()
    if member is None:
        return trees.Entry("missing")
    kind = member_kind(member)
    if kind == "symlink":
        return trees.Entry(kind, target=member.linkname)
    if kind != "file":
        return trees.Entry(kind)
    if member.size > max_bytes:
        return trees.Entry("file", None, member.size)
    extracted = tar.extractfile(member)
    return trees.Entry("file", extracted.read() if extracted is not None else b"", member.size)


def digests(tar: tarfile.TarFile) -> dict[str, str]:
    """As `trees.digests`, for an archive of one directory (its first member)."""
    found: dict[str, str] = {}
    for member in tar:
        content = lambda: trees.sha256_of(tar.extractfile(member))  # noqa: E731, B023
        found[_strip_first(member.name)] = trees.digest_of(
            member_kind(member), content, member.linkname
        )
    return found


def inventory(tar: tarfile.TarFile) -> list[str]:
    """As `trees.inventory`, for an archive of one directory."""
    lines = []
    for member in tar.getmembers():
        rel, kind = _strip_first(member.name), member_kind(member)
        if kind == "directory":
            continue
        found = trees.Entry(kind, b"", member.size, member.linkname if kind == "symlink" else "")
        lines.append(f"{'itself' if rel == '.' else trees.shortened(rel)} ({found.describe()})")
    return trees.capped(lines)


def extract(tar: tarfile.TarFile, dest: Path, *, strip_first: bool) -> trees.Copied:
    """Unpack `tar` into `dest` by `trees.copy_tree`'s rules: regular files and directories,
    links as links, nothing through a link, FIFOs, sockets and devices listed instead of made."""
    copied = trees.Copied()
    dest.mkdir(parents=True, exist_ok=True)
    parents = _Parents(dest)
    try:
        for member in tar:
            _extract_member(tar, member, parents, strip_first, copied)
    except (tarfile.TarError, EOFError, OSError) as exc:
        copied.skip("the rest", f"the archive ends early ({type(exc).__name__}), not copied")
    finally:
        parents.close()
    return copied


class _Parents:
    """The directory an archive member goes into, opened by `trees.open_dir`'s rules. An archive
    lists a folder before what it holds, so the last one opened is kept, and a member one level
    below it costs one openat, not a walk from the top: 1,100 nested folders stay linear."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self._last: tuple[PurePosixPath, int] | None = None

    def open(self, rel: PurePosixPath) -> int:
        last = self._last
        if last is not None and last[0] == rel:
            return os.dup(last[1])
        if last is not None and rel.parent == last[0] and rel.name not in ("", "."):
            fd = trees.open_dir_at(last[1], rel.name)
        else:
            fd = trees.open_dir(self.dest, rel, create=True)
        self.close()
        self._last = (rel, os.dup(fd))
        return fd

    def close(self) -> None:
        if self._last is not None:
            os.close(self._last[1])
            self._last = None


def _extract_member(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    parents: _Parents,
    strip_first: bool,
    copied: trees.Copied,
) -> None:
    rel = _strip_first(member.name) if strip_first else _clean(member.name)
    if rel in (".", ""):
        return
    parts = PurePosixPath(rel)
    if ".." in parts.parts:
        copied.skip(rel, "leads out of the tree, not copied")
        return
    if len(str(parents.dest / rel)) > trees.PATH_MAX_CHARS:
        copied.skip(rel, "a path too long for the host, not copied")
        return
    try:
        parent = parents.open(parts.parent)
    except OSError:
        copied.skip(rel, "under a link, not copied")
        return
    with trees.closing_fd(parent):
        _unpack_member(tar, member, member_kind(member), parent, parts.name, copied, rel)


def _unpack_member(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    kind: str,
    parent: int,
    name: str,
    copied: trees.Copied,
    rel: str,
) -> None:
    with contextlib.suppress(OSError):
        if kind == "directory":
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent)
        elif kind == "symlink":
            trees.remove_entry(parent, name)
            os.symlink(member.linkname, name, dir_fd=parent)
        elif kind != "file":
            copied.skip(rel, f"{trees.Entry(kind).describe()}, not copied")
        else:
            _unpack_file(tar, member, parent, name, copied, rel)


def _unpack_file(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    parent: int,
    name: str,
    copied: trees.Copied,
    rel: str,
) -> None:
    """Sparse: runs of zeros become holes, and only the data counts against the budget; a
    file whose data runs past the budget is removed and listed."""
    extracted = tar.extractfile(member)
    trees.remove_entry(parent, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    data = 0
    with os.fdopen(os.open(name, flags, 0o644, dir_fd=parent), "wb") as out:
        at = 0
        while extracted is not None and (chunk := extracted.read(trees.CHUNK)):
            data += trees.write_sparse(out, chunk, at)
            at += len(chunk)
            if data > copied.budget:
                break
        out.truncate(member.size)
    if data > copied.budget:
        os.unlink(name, dir_fd=parent)
        copied.skip(rel, f"{member.size} bytes, past the copy's budget")
        return
    copied.budget -= data


def spool(stream: Iterable[bytes], out: BinaryIO, max_bytes: int = SPOOL_MAX_BYTES) -> None:
    """An engine's archive stream into `out`, sparse, and no more than `max_bytes` of it."""
    at = 0
    for chunk in stream:
        piece = chunk[: max_bytes - at]
        trees.write_sparse(out, piece, at)
        at += len(piece)
        if at >= max_bytes:
            break
    out.truncate(at)
    out.seek(0)


# -- helpers -----------------------------------------------------------------------------------


def _strip_first(name: str) -> str:
    _, _, rest = _clean(name).partition("/")
    return rest or "."


def _clean(name: str) -> str:
    return "/".join(p for p in name.split("/") if p not in ("", "."))
