"""Tidy table ↔ RUN/table-cache.npz: the table `load_run` builds, kept for the store's content.

Building the table validates every stored record (pydantic), about 2 s of CPU for a leaderboard
of 24,000 trials, on every report. The cache holds the finished table for one store version
(trials stored, largest rowid: trials are only added, so any commit changes it) and one version
of the code that builds it (a hash of table.py and records.py), and is rebuilt when either
changes. It is a NumPy archive read without pickle (numeric columns as arrays, the others as
one JSON text), so a run directory from elsewhere cannot run code through it. Anything unexpected
(unwritable directory, a torn or foreign file) means no cache: the table is built as before.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

CACHE_NAME = "table-cache.npz"
_SOURCES = ("table.py", "../records.py")


@functools.cache
def code_version() -> str:
    """Hash of the code that shapes the table: a change to it invalidates every cache."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for name in _SOURCES:
        digest.update((here / name).read_bytes())
    return digest.hexdigest()[:16]


def read(run_dir: Path, version: tuple[int, int]) -> pd.DataFrame | None:
    """The cached table if it was built from this store version by this code, else None."""
    path = Path(run_dir) / CACHE_NAME
    try:
        with np.load(path, allow_pickle=False) as archive:
            head = json.loads(archive["head"].tobytes())
            if head.get("version") != list(version) or head.get("code") != code_version():
                return None
            texts = json.loads(archive["texts"].tobytes())
            columns = {}
            for name, dtype in head["dtypes"].items():
                column = archive[name] if name in head["arrays"] else texts[name]
                columns[name] = pd.Series(column, dtype=dtype)
    except (OSError, KeyError, ValueError, TypeError):
        return None
    return pd.DataFrame(columns, columns=list(head["dtypes"]))


def write(run_dir: Path, version: tuple[int, int], frame: pd.DataFrame) -> None:
    """Keep `frame` for this store version; silently nothing where it cannot be kept."""
    arrays, texts = {}, {}
    for name in frame.columns:
        column = frame[name]
        if column.dtype.kind in "biuf":
            arrays[name] = column.to_numpy()
        else:
            texts[name] = column.astype(object).where(column.notna(), None).tolist()
    head = {
        "version": list(version),
        "code": code_version(),
        "dtypes": {name: str(frame[name].dtype) for name in frame.columns},
        "arrays": sorted(arrays),
    }
    path = Path(run_dir) / CACHE_NAME
    with contextlib.suppress(OSError, TypeError, ValueError):
        handle, tmp = tempfile.mkstemp(dir=run_dir, prefix=".table-cache.", suffix=".npz")
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, head=_utf8(head), texts=_utf8(texts), **arrays)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _utf8(value: object) -> np.ndarray:
    """JSON as bytes: NumPy would store a str as UTF-32, four times the size."""
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)
