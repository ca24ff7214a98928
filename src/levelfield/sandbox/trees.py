"""What a sandbox left, read and copied without trusting it: links are kept as links and never
followed, FIFOs, sockets and devices are never opened, and sizes are capped.

The agent is root in its sandbox and may leave anything where the harness looks: a link to a
host file (read on the host, it is the host's file), a FIFO (a read blocks forever), a directory
where a file is expected, a gigabyte where a line is expected. Every walk here opens each path
component with O_NOFOLLOW relative to its parent's descriptor, so a link anywhere on the path,
even one swapped in while the walk runs, stops at that component instead of leading out of the
sandbox's tree. Trees that come as an engine's archive are read by the same rules (archives.py).

Bounded: every walk is `_walk.walk` (no recursion, one descriptor, however deep the tree); a
copy writes a sparse file sparse (only its data is read, its holes stay holes) and counts only
data against its budget; a path the host could not name (past PATH_MAX) is listed, not copied.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from levelfield.sandbox import _walk

# Removing a tree the agent made, without recursion and without following its links: for the
# families that clean a trial's directory (the runner, a Ray node).
remove_path = _walk.remove_path

COPY_MAX_BYTES = 256 << 20  # data one collection copies at most (holes are free); the rest listed
PATH_MAX_CHARS = 4000  # a copy's path on the host stays under PATH_MAX (4096), with room
READ_MAX_BYTES = 256 << 20  # what a sandbox's read_file returns at most (past it: not a file)
LISTED_MAX = 20  # skipped entries named in the evidence; the rest are counted
_DIR_FLAGS = _walk.DIR_FLAGS
RENEW_TRIES = 5  # renames aside before a directory the sandbox keeps recreating is given up
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
CHUNK = 1 << 20
HERE = PurePosixPath(".")


@dataclass(frozen=True, slots=True)
class Entry:
    """One path as found: its kind, and a regular file's first bytes."""

    kind: str  # file | directory | symlink | fifo | socket | device | missing
    data: bytes | None = None  # a file's content; None when it is larger than asked for
    size: int = 0
    target: str = ""  # where a symbolic link points (never followed)
    at: str = ""  # the component that stopped the walk, when it is not the path itself

    def describe(self) -> str:
        where = f" at {self.at}" if self.at else ""
        if self.kind == "symlink":
            return f"a symbolic link{where} to {self.target}"
        if self.kind == "file":
            return f"a file of {self.size} bytes"
        article = "an" if self.kind[0] in "aeiou" else "a"
        return f"{article} {self.kind}{where}" if self.kind != "missing" else f"missing{where}"


def kind_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "device"


# -- host trees (the process backend's workspace, the harness's own directories) -----------------


def open_dir(
    root: Path | int, rel: PurePosixPath, *, create: bool = False, replace: bool = False
) -> int:
    """A descriptor of `root/rel`, walked without following links. `root` is the harness's own
    (trusted): a path, or a descriptor (kept open). With `create`, a missing component is made;
    with `replace`, so is one the sandbox made a link or a file (it is removed first). Raises
    OSError (ELOOP, ENOTDIR, ENOENT)."""
    fd = os.dup(root) if isinstance(root, int) else os.open(root, _DIR_FLAGS)
    try:
        for part in _parts(rel):
            child = open_dir_at(fd, part, create=create, replace=replace)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir_at(fd: int, part: str, *, create: bool = True, replace: bool = False) -> int:
    """One step of `open_dir`: the directory `part` in `fd`, by the same rules."""
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError:
        if not (create or replace):
            raise
        os.mkdir(part, 0o755, dir_fd=fd)
    except OSError:
        if not replace:
            raise
        remove_entry(fd, part)
        os.mkdir(part, 0o755, dir_fd=fd)
    return os.open(part, _DIR_FLAGS, dir_fd=fd)


def read_entry(root: Path, rel: PurePosixPath, *, max_bytes: int) -> Entry:
    """What `root/rel` is; a regular file's content up to `max_bytes` (None beyond)."""
    parts = _parts(rel)
    parent = PurePosixPath(*parts[:-1]) if len(parts) > 1 else PurePosixPath()
    try:
        fd = open_dir(root, parent)
    except OSError:
        return _blocked(root, parts[:-1])
    try:
        return _entry_at(fd, parts[-1], max_bytes) if parts else Entry("directory")
    finally:
        os.close(fd)


def _entry_at(dir_fd: int, name: str, max_bytes: int) -> Entry:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return Entry("missing")
    kind = kind_of(st.st_mode)
    if kind == "symlink":
        return Entry(kind, target=os.readlink(name, dir_fd=dir_fd))
    if kind != "file":
        return Entry(kind)
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return Entry("missing")
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):  # swapped for something else since the stat
            return Entry(kind_of(st.st_mode))
        data = fh.read(max_bytes + 1)
    return Entry("file", data if len(data) <= max_bytes else None, st.st_size)


def _blocked(root: Path, parts: list[str]) -> Entry:
    """Which component of a path stopped the walk, and as what."""
    for depth in range(len(parts)):
        found = read_entry(root, PurePosixPath(*parts[: depth + 1]), max_bytes=0)
        if found.kind != "directory":
            at = "/".join(parts[: depth + 1])
            return Entry(found.kind, target=found.target, at=at)
    return Entry("missing")


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove `name` whatever it is, never following a link; absent is fine."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        _walk.remove_tree(dir_fd, name)
    else:
        os.unlink(name, dir_fd=dir_fd)


def empty_dir(dir_fd: int) -> None:
    for name in os.listdir(dir_fd):
        remove_entry(dir_fd, name)


def write_file(dir_fd: int, name: str, src: Path) -> None:
    """Copy the harness's file `src` to `name` in `dir_fd`, replacing whatever the sandbox left
    there (a link is replaced, not written through)."""
    remove_entry(dir_fd, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    out = os.open(name, flags, stat.S_IMODE(src.stat().st_mode) & 0o777, dir_fd=dir_fd)
    with os.fdopen(out, "wb") as dst, open(src, "rb") as fh:
        shutil.copyfileobj(fh, dst, CHUNK)


@dataclass
class Copied:
    """What a copy kept apart: entries it would not open, and files past its byte budget."""

    skipped: list[str] = field(default_factory=list)  # the first LISTED_MAX, named
    more: int = 0  # and how many after them
    budget: int = COPY_MAX_BYTES  # bytes of data left to copy (a sparse file's holes are free)

    def skip(self, rel: str, why: str) -> None:
        if len(self.skipped) < LISTED_MAX:
            self.skipped.append(f"{shortened(rel)} ({why})")
        else:
            self.more += 1

    def listed(self) -> tuple[str, ...]:
        return (*self.skipped, *([f"and {self.more} more"] if self.more else []))


def copy_tree(
    src_fd: int, dest: Path, copied: Copied | None = None, *, modes: bool = False
) -> Copied:
    """Copy the directory open at `src_fd` into `dest`: regular files and directories as they
    are, links as links, nothing else. Never raises for what it finds; never opens a FIFO. With
    `modes`, files and folders keep their permission bits (`dest` is fresh: nothing in it is a
    link but the links it copies)."""
    copied = copied if copied is not None else Copied()
    dest.mkdir(parents=True, exist_ok=True)
    try:
        for rel, st, dir_fd, name in _walk.walk(src_fd):
            _copy_entry(rel, st, dir_fd, name, dest / rel, copied, modes=modes)
    except _walk.TreeChanged as exc:
        copied.skip("the rest", f"{exc}: not copied")
    return copied


def _copy_entry(
    rel: str,
    st: os.stat_result,
    dir_fd: int,
    name: str,
    target: Path,
    copied: Copied,
    *,
    modes: bool = False,
) -> None:
    kind = kind_of(st.st_mode)
    if len(str(target)) > PATH_MAX_CHARS:
        copied.skip(rel, "a path too long for the host, not copied")
        return
    try:
        if kind == "symlink":
            os.symlink(os.readlink(name, dir_fd=dir_fd), target)
        elif kind == "directory":
            target.mkdir(exist_ok=True)
        elif kind != "file":
            copied.skip(rel, f"{Entry(kind).describe()}, not copied")
        elif st.st_blocks * 512 > copied.budget:
            copied.skip(rel, f"{st.st_size} bytes, past the copy's budget")
        else:
            copied.budget -= copy_file(dir_fd, name, target, st.st_size)
        if modes and kind in ("directory", "file") and target.exists():
            os.chmod(target, stat.S_IMODE(st.st_mode))  # a path this copy made, never a link
    except OSError as exc:
        copied.skip(rel, f"not copied: {exc.strerror or exc}")


def copy_file(dir_fd: int, name: str, target: Path, size: int) -> int:
    """Copy a regular file sparse: only its data segments are read and written, its holes stay
    holes. No more than `size` bytes (it may still be growing). Returns the data bytes copied."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return 0
        with open(target, "wb") as out:
            copied = 0
            for start, end in data_segments(fd, size):
                left, at = end - start, start
                while left > 0 and (chunk := os.pread(fd, min(left, CHUNK), at)):
                    copied += write_sparse(out, chunk, at)
                    left, at = left - len(chunk), at + len(chunk)
            out.truncate(size)
        return copied
    finally:
        os.close(fd)


def data_segments(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """[start, end) of each run of data below `size`, by SEEK_DATA/SEEK_HOLE; the whole file
    where the filesystem cannot tell."""
    at = 0
    while at < size:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
            end = os.lseek(fd, start, os.SEEK_HOLE)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no data past `at`: a hole to the end
                return
            yield at, size
            return
        if start >= size:
            return
        yield start, min(end, size)
        at = end


_ZEROS = memoryview(bytes(CHUNK))


def write_sparse(out: BinaryIO, chunk: bytes, at: int) -> int:
    """Write `chunk` at `at`, or leave a hole where it is all zeros; returns the bytes written.
    The caller truncates the file to its size at the end (a hole there too)."""
    written = 0
    view = memoryview(chunk)
    for offset in range(0, len(view), CHUNK):
        piece = view[offset : offset + CHUNK]
        if _ZEROS[: len(piece)] != piece:
            out.seek(at + offset)
            out.write(piece)
            written += len(piece)
    return written


def digests(root: Path, rel: PurePosixPath = HERE) -> dict[str, str]:
    """Every entry under `root/rel`, relative path → what it is ("file:<sha256>", "directory",
    "symlink:<target>", "fifo"...), read without following links. When `root/rel` is not a
    directory, {".": what it is}."""
    try:
        fd = open_dir(root, rel)
    except OSError:
        found = read_entry(root, rel, max_bytes=0)
        return {".": f"symlink:{found.target}" if found.kind == "symlink" else found.kind}
    with closing_fd(fd):
        found = {".": "directory"}
        for path, st, dir_fd, name in _walk.walk(fd):
            kind = kind_of(st.st_mode)
            link = os.readlink(name, dir_fd=dir_fd) if kind == "symlink" else ""
            found[path] = digest_of(kind, lambda: _filesha256_of(dir_fd, name), link)  # noqa: B023
        return found


def inventory(dir_fd: int) -> list[str]:
    """What a directory holds, one line per entry, for the evidence (at most LISTED_MAX)."""
    lines, more = [], 0
    try:
        for path, st, parent, name in _walk.walk(dir_fd):
            if stat.S_ISDIR(st.st_mode):
                continue
            if len(lines) < LISTED_MAX:
                lines.append(f"{shortened(path)} ({_entry_at(parent, name, 0).describe()})")
            else:
                more += 1
    except _walk.TreeChanged as exc:
        lines.append(f"and more ({exc})")
    return lines + ([f"and {more} more"] if more else [])


def renew_dir(root: Path, rel: PurePosixPath, keep_in: Path) -> tuple[str, ...]:
    """Replace `root/rel` by a new, empty directory: a new inode, so a descriptor the sandbox kept
    on the old one reaches only the old one. What was there is copied to `keep_in` by
    `copy_tree`'s rules and listed."""
    parent = open_dir(root, rel.parent, replace=True)
    with closing_fd(parent):
        found = _entry_at(parent, rel.name, 0)
        listed: list[str] = []
        if found.kind == "directory":
            with closing_fd(os.open(rel.name, _DIR_FLAGS, dir_fd=parent)) as fd:
                listed = inventory(fd)
                copy_tree(fd, keep_in)  # what it could not keep is in the inventory too
        elif found.kind != "missing":
            listed = [f"{rel.name} itself ({found.describe()})"]
        if not _renew_at(parent, rel.name):
            listed.append("(not renewed: a process of the sandbox kept it in use)")
    return tuple(listed)


def _renew_at(parent: int, name: str) -> bool:
    """A new, empty `name`, whatever a process of the sandbox does to the old one meanwhile:
    the old one is renamed aside (atomic, however busy it is) under a name it cannot guess, then
    removed as far as it lets go; what it keeps writing there stays its own."""
    for _ in range(RENEW_TRIES):
        aside = f".{name}.old-{secrets.token_hex(6)}"
        try:
            os.rename(name, aside, src_dir_fd=parent, dst_dir_fd=parent)
        except FileNotFoundError:
            pass  # nothing to put aside
        except OSError:
            continue
        else:
            _remove_aside(parent, aside)
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
            return True
    return False


def _remove_aside(parent: int, aside: str) -> None:
    for _ in range(RENEW_TRIES):  # a write that found the old one just before its rename
        try:
            remove_entry(parent, aside)
            return
        except OSError:
            continue


def copy_in(src: Path, root: Path, rel: PurePosixPath, *, merge: bool = False) -> None:
    """Put the harness's `src` (a file or a tree) at `root/rel`, replacing what the sandbox left
    there (with `merge`, a tree goes into what is there, as `docker cp` does) and never writing
    through a link it made."""
    if not src.is_dir():
        with closing_fd(open_dir(root, rel.parent, replace=True)) as parent:
            write_file(parent, rel.name, src)
        return
    with closing_fd(open_dir(root, rel, replace=True)) as fd:
        if not merge:
            empty_dir(fd)
        _copy_host_tree(src, fd)


def _copy_host_tree(src: Path, dest_fd: int) -> None:
    for entry in os.scandir(src):
        if entry.is_symlink():
            remove_entry(dest_fd, entry.name)
            os.symlink(os.readlink(entry.path), entry.name, dir_fd=dest_fd)
        elif entry.is_dir(follow_symlinks=False):
            with contextlib.suppress(FileExistsError):
                os.mkdir(entry.name, 0o755, dir_fd=dest_fd)
            with closing_fd(os.open(entry.name, _DIR_FLAGS, dir_fd=dest_fd)) as child:
                _copy_host_tree(Path(entry.path), child)
        elif entry.is_file(follow_symlinks=False):
            write_file(dest_fd, entry.name, Path(entry.path))


def _filesha256_of(dir_fd: int, name: str) -> str:
    try:
        fh = os.fdopen(os.open(name, _FILE_FLAGS, dir_fd=dir_fd), "rb")
    except OSError:
        return "unreadable"
    with fh:
        return sha256_of(fh)


def digest_of(kind: str, sha256: Callable[[], str], target: str) -> str:
    """One entry of `digests`, the same whether read on the host or from an archive."""
    if kind == "file":
        return f"file:{sha256()}"
    return f"symlink:{target}" if kind == "symlink" else kind


# -- helpers -----------------------------------------------------------------------------------


SHOWN_PATH_CHARS = 160  # a path in the evidence: 1,100 nested folders make one of 2,200


def shortened(path: str) -> str:
    """`path` as the evidence names it: its start and its end when it is long."""
    if len(path) <= SHOWN_PATH_CHARS:
        return path
    cut = len(path) - SHOWN_PATH_CHARS + 40
    return f"{path[:40]}…({cut} characters)…{path[-(SHOWN_PATH_CHARS - 80) :]}"


def capped(lines: list[str]) -> list[str]:
    """At most LISTED_MAX lines named, the rest counted."""
    more = len(lines) - LISTED_MAX
    return lines[:LISTED_MAX] + ([f"and {more} more"] if more > 0 else [])


def _parts(rel: PurePosixPath) -> list[str]:
    parts = [p for p in rel.parts if p not in ("/", ".", "")]
    if ".." in parts:
        raise OSError(f"{rel}: '..' is not a path inside a sandbox")
    return parts


def sha256_of(fh: object) -> str:
    digest = hashlib.sha256()
    read = getattr(fh, "read", None)
    while read is not None and (chunk := read(CHUNK)):
        digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)
