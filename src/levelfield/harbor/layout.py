"""A PATH given to the import → its trial folders, each with the submission it belongs to.

Three kinds of folder hold Harbor trials, told apart by how deep most trial files lie:

    job           PATH/<trial>/result.json
    submission    PATH/<job>/<trial>/result.json                (the leaderboard's unit)
    leaderboard   PATH/.../<submission>/<job>/<trial>/result.json

A trial's label is its submission's folder name (`--label` names a single job or submission
instead). A job given alone has no submission folder: its trials keep Harbor's `agent:model`
name, as levelfield labelled a job before leaderboards. The most common depth decides, and in a
leaderboard the submissions are the folders at the level it puts them at: a submission whose
trials sit without a job folder, or one level deeper, keeps its own name, and a folder above
the leaderboard (`submissions/terminal-bench/2.0/...`) still labels by submission.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Generic, TypeVar

from levelfield.errors import InputError
from levelfield.harbor.trial_file import RESULT_NAME, trial_prefix

T = TypeVar("T")


class Kind(StrEnum):
    JOB = "job"
    SUBMISSION = "submission"
    LEADERBOARD = "leaderboard"


@dataclass(frozen=True, slots=True)
class Found(Generic[T]):
    """A trial folder `parts` below PATH (the last part is the trial folder) and what `read`
    made of it."""

    parts: tuple[str, ...]
    trial: T


def walk_trials(
    root: Path,
    read: Callable[[str, list[str]], T | None],
    skip: Callable[[str, str], None],
    other_files: list[str] | None = None,
) -> Iterator[Found[T]]:
    """Every folder under `root` holding a result.json that `read` accepts as a trial (it gets
    the folder and its sub-folders' names, and returns None for a job's summary or a file it
    skipped), in name order. Nothing below a trial folder is read: an agent's logs may hold
    files of any name. Paths stay strings: tens of thousands of pathlib objects would cost more
    than the reading.

    A symlinked folder is followed, after the real folders, and its trials are placed by the
    link's path (a leaderboard's `Sub -> /elsewhere/Sub` is the submission `Sub`). One that
    leads to a folder read already (a second name for it, a loop) is not read twice, and
    `skip(path, why)` is told, as it is of a folder that cannot be listed and a broken link.
    A symlinked result.json is read last, and only if it leads to a file not read already.
    The paths of the other files in the folders read that are not trial folders are appended
    to `other_files`: what else the PATH holds (Terminal-Bench 1.x results) without a second
    walk."""
    top = os.fspath(root).rstrip(os.sep) or os.sep
    seen: set[tuple[int, int]] = set()
    links: list[tuple[str, tuple[str, ...]]] = []
    files = _Files(others=other_files if other_files is not None else [])
    yield from _walk(top, (), read, skip, seen, links, files)
    while links:
        path, parts = links.pop(0)
        yield from _walk(path, parts, read, skip, seen, links, files)
    yield from _linked_results(files, read, skip)


@dataclass(slots=True)
class _Files:
    """The result.json files read (device, inode), and the trial folders whose result.json is
    a symlink, read after every real file so that a link to another trial's file is found out
    whichever comes first in name order."""

    read: set[tuple[int, int]] = field(default_factory=set)
    linked: list[tuple[str, tuple[str, ...], list[str]]] = field(default_factory=list)
    others: list[str] = field(default_factory=list)  # files of the folders that hold no trial


def _linked_results(
    files: _Files,
    read: Callable[[str, list[str]], T | None],
    skip: Callable[[str, str], None],
) -> Iterator[Found[T]]:
    """A symlinked result.json is read as a trial only when it leads to a file not read yet
    (a trial whose file lives elsewhere); one that leads to a trial's file read already would
    count that trial twice, and is named instead. A broken link is read: that says why."""
    for path, where, subdirs in files.linked:
        result = os.path.join(path, RESULT_NAME)
        try:
            info = os.stat(result)
        except OSError:
            info = None
        if info is not None and (info.st_dev, info.st_ino) in files.read:
            skip(path, f"its result.json is a symlink to {os.path.realpath(result)}, a trial's "
                 "file read already: not a second trial")  # fmt: skip
            continue
        if info is not None:
            files.read.add((info.st_dev, info.st_ino))
        trial = read(path, subdirs)
        if trial is not None:
            yield Found(where, trial)


def _walk(
    top: str,
    parts: tuple[str, ...],
    read: Callable[[str, list[str]], T | None],
    skip: Callable[[str, str], None],
    seen: set[tuple[int, int]],
    links: list[tuple[str, tuple[str, ...]]],
    files: _Files,
) -> Iterator[Found[T]]:
    """Depth first in name order; symlinked folders met are appended to `links`."""
    try:
        head = os.stat(top)
    except OSError as exc:
        skip(top, f"a symlink that cannot be followed: {exc.strerror}")
        return
    device = head.st_dev
    if (device, head.st_ino) in seen:
        skip(top, f"a symlink to {os.path.realpath(top)}, a folder read already: read once")
        return
    stack: list[tuple[str, tuple[str, ...], int]]
    stack = [(top, parts, head.st_ino)]
    while stack:
        path, where, inode = stack.pop()
        if (device, inode) in seen:  # a link above led back into a folder read already
            skip(path, "the same folder as one read already (through a symlink): read once")
            continue
        seen.add((device, inode))
        try:
            with os.scandir(path) as listing:
                entries = list(listing)
        except OSError as exc:
            skip(path, f"a folder that cannot be listed: {exc.strerror}")
            continue
        result: os.DirEntry[str] | None = None
        folders, linked, others = [], [], []
        for entry in entries:
            if entry.name == RESULT_NAME and not entry.is_dir():
                result = entry  # a broken link too: reading it says why it fails
            elif entry.is_symlink():
                if entry.is_dir():
                    linked.append((entry.path, (*where, entry.name)))
                elif not os.path.exists(entry.path):
                    skip(entry.path, f"a broken symlink to {os.readlink(entry.path)}")
                else:
                    others.append(entry.path)
            elif entry.is_dir(follow_symlinks=False):
                folders.append(entry)
            else:
                others.append(entry.path)
        folders.sort(key=lambda e: e.name)
        if result is not None and result.is_symlink() and trial_prefix(os.path.basename(path)):
            files.linked.append((path, where, [e.name for e in folders]))
            continue  # a trial's folder: nothing below it is read
        if result is not None:
            trial = read(path, [e.name for e in folders])
            if trial is not None:
                files.read.add((device, result.inode()))
                yield Found(where, trial)
                continue
        files.others.extend(others)
        links.extend(sorted(linked))
        stack.extend((e.path, (*where, e.name), e.inode()) for e in reversed(folders))


@dataclass(frozen=True, slots=True)
class Shape:
    """What kind of folder a PATH is; in a leaderboard, at which depth below it (an index
    into a trial's `parts`) its submission folders lie."""

    kind: Kind
    submission_level: int = 0


def shape_of(found: list[Found[T]]) -> Shape:
    """By the most common number of folders from PATH down to a trial folder (itself included):
    1 a job, 2 a submission, 3 or more a leaderboard whose submissions are 3 above the trial."""
    depth = Counter(len(f.parts) for f in found).most_common(1)[0][0]
    if depth <= 1:
        return Shape(Kind.JOB)
    if depth == 2:
        return Shape(Kind.SUBMISSION)
    return Shape(Kind.LEADERBOARD, depth - 3)


def folders_without_trials(root: Path, shape: Shape, found: list[Found[T]]) -> list[str]:
    """In a leaderboard, the folders beside its submissions (at the level its submissions lie
    at, under the same parents) from which no trial was read, in name order: each is named by
    the import with why, never left out unsaid."""
    if shape.kind is not Kind.LEADERBOARD:
        return []
    level = shape.submission_level
    held: dict[tuple[str, ...], set[str]] = {}
    for f in found:
        if len(f.parts) > level + 1:
            held.setdefault(f.parts[:level], set()).add(f.parts[level])
    out = []
    for parent, names in sorted(held.items()):
        folder = os.path.join(os.fspath(root), *parent)
        try:
            with os.scandir(folder) as listing:
                others = sorted(e.name for e in listing if e.is_dir() and e.name not in names)
        except OSError:
            continue  # read above: a folder that cannot be listed was named then
        out.extend(os.path.join(folder, name) for name in others)
    return out


@dataclass(frozen=True, slots=True)
class Place:
    """Where a trial sits: its submission's label (None: name it by Harbor's agent) and its
    path below the submission folder (job/trial), which identifies it within the submission."""

    submission: str | None
    within: str
    job: str


def placer(root: Path, shape: Shape, label: str | None) -> Callable[[tuple[str, ...]], Place]:
    """`parts` of a trial folder below `root` → its Place (made once per PATH: called per trial)."""
    name, parent, level = root.name, root.parent.name, shape.submission_level

    def job_of(parts: tuple[str, ...]) -> str:
        return parts[-2] if len(parts) > 1 else name

    def leaderboard(parts: tuple[str, ...]) -> Place:
        at = min(level, len(parts) - 2) if len(parts) > 1 else 0
        return Place(parts[at], "/".join(parts[at + 1 :]), job_of(parts))

    def submission(parts: tuple[str, ...]) -> Place:
        return Place(label or name, "/".join(parts), job_of(parts))

    def job(parts: tuple[str, ...]) -> Place:
        if not parts:  # PATH is a trial folder itself
            return Place(label, f"{parent}/{name}", parent)
        return Place(label, "/".join((name, *parts)), job_of(parts))

    return {Kind.LEADERBOARD: leaderboard, Kind.SUBMISSION: submission, Kind.JOB: job}[shape.kind]


def check_label(paths: list[Path], label: str | None) -> None:
    if label is not None and len(paths) != 1:
        raise InputError(f"--label names one job or submission; {len(paths)} paths were given")
    if label is not None and not label.strip():
        raise InputError("--label must not be empty")


def check_label_fits(shape: Shape, root: Path, label: str | None) -> None:
    if label is not None and shape.kind is Kind.LEADERBOARD:
        raise InputError(
            f"{root} is a leaderboard (a folder of submissions): each is labelled by its folder "
            "name, so --label does not apply; import one submission to label it"
        )
