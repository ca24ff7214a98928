"""Walking and removing trees an agent made, however deep, with one descriptor and no recursion.

An agent can nest folders deeper than Python's recursion limit (1,100 under /logs/agent is
enough for a RecursionError in a recursive walk, os.walk on Python 3.11 included), deeper than a
path can name (PATH_MAX), and more of them than a process may hold open. So a walk here holds
one directory open at a time: it goes down with openat(name, O_NOFOLLOW) and back up with
openat(".."), and checks on the way up that ".." is the directory it came from (device and
inode), since the sandbox may move a folder while the harness walks it: ".." out of a moved
folder, or out of the workspace's root, would lead elsewhere, so the walk stops there instead
(`TreeChanged`). Every name is looked at with lstat, never followed.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class TreeChanged(OSError):
    """A folder was moved while it was walked: the walk stopped rather than follow it."""


@dataclass
class _Level:
    names: list[str]
    rel: str  # the level's path from the walk's top, ending in "/" (empty at the top)
    ident: tuple[int, int]  # (st_dev, st_ino): what ".." must be on the way back up
    next: int = 0


def _ident(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _listing(fd: int) -> list[str]:
    try:
        return sorted(os.listdir(fd))
    except OSError:
        return []


def walk(top_fd: int) -> Iterator[tuple[str, os.stat_result, int, str]]:
    """(relative path, lstat, its directory's descriptor, its name) for every entry under the
    directory open at `top_fd`, depth first and sorted, each directory before what it holds.
    The descriptor is valid until the next step of the walk; `top_fd` stays the caller's.
    Raises TreeChanged when a folder moved under it; skips what vanished."""
    fd = os.dup(top_fd)
    levels = [_Level(_listing(fd), "", _ident(fd))]
    try:
        while levels:
            level = levels[-1]
            if level.next >= len(level.names):
                levels.pop()
                if levels:
                    here, fd = fd, -1  # `_up` closes it, whatever it finds
                    fd = _up(here, levels[-1].ident)
                continue
            name = level.names[level.next]
            level.next += 1
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            yield f"{level.rel}{name}", st, fd, name
            if stat.S_ISDIR(st.st_mode):
                child = _down(fd, name, st)
                if child is not None:
                    os.close(fd)
                    fd = child
                    levels.append(_Level(_listing(fd), f"{level.rel}{name}/", _ident(fd)))
    finally:
        if fd >= 0:
            os.close(fd)


def _down(fd: int, name: str, st: os.stat_result) -> int | None:
    """The subdirectory `name`, if it is still the one just looked at."""
    try:
        child = os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError:
        return None
    if _ident(child) != (st.st_dev, st.st_ino):
        os.close(child)
        return None
    return child


def _up(fd: int, expected: tuple[int, int]) -> int:
    try:
        parent = os.open("..", DIR_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    if _ident(parent) != expected:
        os.close(parent)
        raise TreeChanged("a folder was moved while the harness walked it")
    return parent


def remove_tree(dir_fd: int, name: str) -> None:
    """Remove the directory `name` in `dir_fd` and all it holds, deepest first, without
    recursion and without following a link; absent is fine."""
    try:
        fd = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    names = [name]
    idents = [_ident(fd)]
    try:
        while True:
            child = _empty_but_one_dir(fd)
            if child is not None:
                sub, sub_fd = child
                os.close(fd)
                fd = sub_fd
                names.append(sub)
                idents.append(_ident(fd))
                continue
            if len(names) == 1:
                break
            done = names.pop()
            idents.pop()
            here, fd = fd, -1  # `_up` closes it, whatever it finds
            fd = _up(here, idents[-1])
            os.rmdir(done, dir_fd=fd)
    finally:
        if fd >= 0:
            os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


def _empty_but_one_dir(fd: int) -> tuple[str, int] | None:
    """Unlink every non-directory here; the first subdirectory, opened, if one is left."""
    for entry in _listing(fd):
        try:
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry, dir_fd=fd)
            continue
        child = _down(fd, entry, st)
        if child is not None:
            return entry, child
    return None


def remove_path(path: os.PathLike[str] | str) -> None:
    """`remove_tree` for a path of the harness's own (a trial's directory, a workspace), or
    unlink it when it is not a directory; absent is fine."""
    head, tail = os.path.split(os.path.abspath(os.fspath(path)))
    try:
        parent = os.open(head, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(tail, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                remove_tree(parent, tail)
            else:
                os.unlink(tail, dir_fd=parent)
    finally:
        os.close(parent)
