"""A PATH given to the import → its trial folders, each with the submission it belongs to.

Three kinds of folder hold Harbor trials, told apart by how deep most trial files lie:

    job           PATH/<trial>/result.json
    submission    PATH/<job>/<trial>/result.json                (the leaderboard's unit)
    leaderboard   PATH/<submission>/<job>/<trial>/result.json

A trial's label is its submission's folder name (`--label` names a single job or submission
instead). A job given alone has no submission folder: its trials keep Harbor's `agent:model`
name, as levelfield labelled a job before leaderboards. The most common depth decides, so one
submission whose trials sit without a job folder does not turn a leaderboard into a submission.
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


KIND_OF_DEPTH = {1: Kind.JOB, 2: Kind.JOB, 3: Kind.SUBMISSION}  # deeper: a leaderboard


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
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        if RESULT_NAME not in filenames:
            continue
        trial = read(dirpath)
        if trial is not None:
            dirnames.clear()
            rel = os.path.relpath(dirpath, top)
            yield Found(() if rel == os.curdir else tuple(rel.split(os.sep)), trial)


def kind_of(found: list[Found[T]]) -> Kind:
    depth = Counter(len(f.parts) + 1 for f in found).most_common(1)[0][0]
    return KIND_OF_DEPTH.get(depth, Kind.LEADERBOARD)


@dataclass(frozen=True, slots=True)
class Place:
    """Where a trial sits: its submission's label (None: name it by Harbor's agent) and its
    path below the submission folder (job/trial), which identifies it within the submission."""

    submission: str | None
    within: str
    job: str


def place_of(root: Path, kind: Kind, parts: tuple[str, ...], label: str | None) -> Place:
    if not parts:  # PATH is a trial folder itself
        return Place(label, f"{root.parent.name}/{root.name}", root.parent.name)
    job = parts[-2] if len(parts) > 1 else root.name
    if kind is Kind.LEADERBOARD:
        return Place(parts[0], "/".join(parts[1:]), job)
    if kind is Kind.SUBMISSION:
        return Place(label or root.name, "/".join(parts), job)
    return Place(label, "/".join((root.name, *parts)), job)


def check_label(paths: list[Path], label: str | None) -> None:
    if label is not None and len(paths) != 1:
        raise InputError(f"--label names one job or submission; {len(paths)} paths were given")
    if label is not None and not label.strip():
        raise InputError("--label must not be empty")


def check_label_fits(kind: Kind, root: Path, label: str | None) -> None:
    if label is not None and kind is Kind.LEADERBOARD:
        raise InputError(
            f"{root} is a leaderboard (a folder of submissions): each is labelled by its folder "
            "name, so --label does not apply; import one submission to label it"
        )
