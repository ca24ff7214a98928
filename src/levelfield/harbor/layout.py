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
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Generic, TypeVar

from levelfield.errors import InputError
from levelfield.harbor.trial_file import RESULT_NAME

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


def walk_trials(root: Path, read: Callable[[str], T | None]) -> Iterator[Found[T]]:
    """Every folder under `root` holding a result.json that `read` accepts as a trial (it
    returns None for a job's summary), in name order. Nothing below a trial folder is read:
    an agent's logs may hold files of any name. Paths stay strings: tens of thousands of
    pathlib objects would cost more than the reading."""
    top = os.fspath(root)
    below = len(top.rstrip(os.sep)) + 1  # os.walk's paths all start with `top`
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        if RESULT_NAME not in filenames:
            continue
        trial = read(dirpath)
        if trial is not None:
            dirnames.clear()
            rel = dirpath[below:]
            yield Found(tuple(rel.split(os.sep)) if rel else (), trial)


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
