"""Room in the run directory: which errors mean "the disk is full", and what the user is told."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from levelfield import _room
from levelfield.errors import RunDirFull, StoreError
from levelfield.outcome import reason_for_error
from levelfield.records import Reason


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise outer from inner
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        sqlite3.OperationalError("database or disk is full"),
        _chained(RuntimeError("copying logs failed"), OSError(errno.ENOSPC, "full")),
    ],
)
def test_a_full_disk_is_recognised_along_the_causes(exc: BaseException) -> None:
    assert _room.is_disk_full(exc)


@pytest.mark.parametrize(
    "exc", [OSError(errno.EACCES, "denied"), sqlite3.OperationalError("locked"), None]
)
def test_other_errors_are_not_a_full_disk(exc: BaseException | None) -> None:
    assert not _room.is_disk_full(exc)


def test_the_message_says_where_how_much_and_what_to_do(tmp_path: Path) -> None:
    error = _room.run_dir_full(tmp_path, free=3 << 20)
    assert isinstance(error, StoreError)
    text = str(error)
    assert str(tmp_path) in text and "3 MiB free" in text
    assert "run the same command to resume" in text


def test_room_enough_passes_and_the_error_has_its_row(tmp_path: Path) -> None:
    if _room.free_bytes(tmp_path) >= _room.MIN_FREE_BYTES:
        _room.check_room(tmp_path)  # no error with room to spare
    assert reason_for_error(RunDirFull("x")) is Reason.HARNESS_ERROR
