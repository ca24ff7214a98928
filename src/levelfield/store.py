"""The run's SQLite store: one row per trial, committed the moment the trial ends.

WAL mode, so `levelfield results` can read while a run writes. A writer holds an flock on
`run.lock` for its whole life: a second live writer is refused, and a lock left by a killed
harness vanishes with its process, so resuming never needs manual cleanup.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import ValidationError
from pydantic_core import from_json

from levelfield._room import is_disk_full, run_dir_full
from levelfield.errors import StoreError
from levelfield.records import TrialRecord

DB_NAME = "run.db"
LOCK_NAME = "run.lock"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, window TEXT NOT NULL, seed INTEGER NOT NULL,
    created_at TEXT NOT NULL, trial_keys TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trials (
    trial_key TEXT NOT NULL, attempt INTEGER NOT NULL,
    task TEXT NOT NULL, agent TEXT NOT NULL, policy TEXT NOT NULL, repeat INTEGER NOT NULL,
    window TEXT NOT NULL, outcome TEXT NOT NULL, reason TEXT NOT NULL,
    started_at TEXT NOT NULL, finished_at TEXT NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (trial_key, attempt));
"""


class Store:
    def __init__(self, run_dir: Path, conn: sqlite3.Connection, lock_fd: int | None) -> None:
        self.run_dir, self._conn, self._lock_fd = run_dir, conn, lock_fd

    @classmethod
    def open_for_writing(cls, run_dir: Path) -> Store:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock_fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StoreError(f"{run_dir} is being written by another live levelfield run") from None
        try:
            conn = _connect(run_dir / DB_NAME)
            conn.executescript(SCHEMA)
        except (StoreError, sqlite3.OperationalError) as exc:
            os.close(lock_fd)
            if is_disk_full(exc):
                raise run_dir_full(run_dir) from exc
            raise
        return cls(run_dir, conn, lock_fd)

    @classmethod
    def open_for_reading(cls, run_dir: Path) -> Store:
        db = run_dir / DB_NAME
        if not db.is_file():
            raise StoreError(f"{run_dir}: no run here (no {DB_NAME})")
        return cls(run_dir, _connect(db), None)

    def close(self) -> None:
        self._conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        rows = self._conn.execute("SELECT key, value FROM meta").fetchall()
        return {k: json.loads(v) for k, v in rows}

    def set_meta(self, values: dict[str, Any]) -> None:
        with self._writing("meta"):
            self._conn.executemany(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                [(k, json.dumps(v)) for k, v in values.items()],
            )

    def add_plan(self, window: str, seed: int, created_at: str, keys: Iterable[str]) -> None:
        with self._writing("plan"):
            self._conn.execute(
                "INSERT INTO plans(window, seed, created_at, trial_keys) VALUES (?, ?, ?, ?)",
                (window, seed, created_at, json.dumps(list(keys))),
            )

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """One transaction; a full disk rolls it back whole and says so (RunDirFull)."""
        try:
            with self._conn:
                yield
        except sqlite3.OperationalError as exc:
            if is_disk_full(exc):
                raise run_dir_full(self.run_dir) from exc
            raise StoreError(f"{self.run_dir}: cannot write the {what}: {exc}") from exc

    def plans(self) -> list[dict[str, Any]]:
        rows = self._conn.execute(
            "SELECT window, seed, created_at, trial_keys FROM plans ORDER BY seq"
        )
        return [
            {"window": w, "seed": s, "created_at": c, "trial_keys": json.loads(k)}
            for w, s, c, k in rows
        ]

    def stored_keys(self) -> set[str]:
        return {k for (k,) in self._conn.execute("SELECT DISTINCT trial_key FROM trials")}

    def commit(self, record: TrialRecord) -> None:
        """One transaction per trial: a crash loses at most the trials still running."""
        try:
            with self._writing(f"record of trial {record.trial_key}"):
                self._conn.execute(_INSERT, row_of(record))
        except sqlite3.IntegrityError as exc:
            raise StoreError(
                f"trial {record.trial_key} attempt {record.attempt} is already stored"
            ) from exc

    def commit_rows(self, rows: Iterable[Row]) -> None:
        """All in one transaction, or none: for trials that exist elsewhere already (an
        import), where a per-trial commit would only cost time. Each row's `record` must load
        as a TrialRecord (`load_record`): `row_of` makes such rows, and so does the Harbor
        import, from parts it validated, tens of thousands at a time."""
        try:
            with self._writing("imported records"):
                self._conn.executemany(_INSERT, rows)
        except sqlite3.IntegrityError as exc:
            raise StoreError(f"{self.run_dir}: a trial to add is already stored ({exc})") from exc

    def records(self) -> Iterator[TrialRecord]:
        return map(load_record, self._raw_records())

    def documents(self) -> Iterator[dict[str, Any]]:
        """Each record in its stored JSON form, unvalidated (see `load_document`), in the
        order of `records`."""
        return map(load_document, self._raw_records())

    def _raw_records(self) -> Iterator[str]:
        for (raw,) in self._conn.execute("SELECT record FROM trials ORDER BY finished_at"):
            yield raw

    def count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])

    def version(self) -> tuple[int, int]:
        """(trials stored, largest rowid): trials are only ever added, so this changes with
        every commit and names the store's content for anything derived from it."""
        count, last = self._conn.execute("SELECT COUNT(*), MAX(rowid) FROM trials").fetchone()
        return int(count), int(last or 0)


_INSERT = "INSERT INTO trials VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"


class Row(NamedTuple):
    """A trial as the trials table holds it: the columns that queries select by, and the whole
    record as JSON."""

    trial_key: str
    attempt: int
    task: str
    agent: str
    policy: str
    repeat: int
    window: str
    outcome: str
    reason: str
    started_at: str
    finished_at: str
    record: str


def row_of(record: TrialRecord) -> Row:
    return Row(
        record.trial_key,
        record.attempt,
        record.task,
        record.agent,
        record.policy,
        record.repeat,
        record.window,
        record.outcome.value,
        record.reason.value,
        record.started_at,
        record.finished_at,
        record.model_dump_json(),
    )


def load_record(raw: str) -> TrialRecord:
    """A record without schema_version is v1; an unknown version is refused, not misread.

    Parsed by pydantic straight from the JSON text first (twice as fast as json.loads and then
    validating the dict: a leaderboard of 24,000 records is read in every report); a record that
    fails there takes the slow path, which says why."""
    try:
        return TrialRecord.model_validate_json(raw)
    except ValidationError:
        pass
    data = json.loads(raw)
    _check_version(data.setdefault("schema_version", 1))
    return TrialRecord.model_validate(data)


def load_document(raw: str) -> dict[str, Any]:
    """A record as the JSON it was stored as, for readers of every field that trust the store
    (each record validated as it was written): a third of the cost of `load_record`. The
    version rule is the same."""
    try:
        document = from_json(raw)
    except ValueError as exc:
        raise StoreError(f"a stored record is not JSON: {exc}") from None
    if type(document) is not dict or type(document.get("trial_key")) is not str:
        raise StoreError(f"a stored record is not a trial's: {raw[:80]!r}")
    _check_version(document.get("schema_version", 1))
    return document


def _check_version(version: object) -> None:
    if version != 1:
        raise StoreError(f"trial record schema_version {version} is newer than this levelfield")


def _connect(path: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(path, timeout=30, check_same_thread=False)
        # Takes effect only in a new store, before its first table: a record is 1-2 kB, and
        # 16 kB pages cost a third less CPU than 4 kB ones to insert a leaderboard's 24,000
        # (0.18 s against 0.26 s, benchmarks/harbor_import.py's machine).
        conn.execute("PRAGMA page_size=16384")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: not a usable levelfield store ({exc})") from exc
    return conn


@contextlib.contextmanager
def without_cycle_collection() -> Iterator[None]:
    """Reading or writing a leaderboard holds every trial until it is done: hundreds of
    thousands of dicts and models that form no cycle. Python's cycle collector would walk them
    all again at each full collection (on the shared leaderboard that cost 5-10x the validation's
    own time, and more than doubled the table's build); reference counting frees all of it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def reading(run_dir: Path) -> Iterator[Store]:
    store = Store.open_for_reading(run_dir)
    try:
        yield store
    finally:
        store.close()
