"""The cached tidy table is the table the records give, for the store's content only: a trial
added since, a changed file, or one made elsewhere means the records are read again."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from levelfield.analysis import table_cache
from levelfield.analysis.table import load_run, trials_frame
from levelfield.errors import StoreError
from levelfield.store import Store, reading
from tests.unit.test_store import record


def _records_table(run_dir: Path) -> pd.DataFrame:
    with reading(run_dir) as store:
        return trials_frame(list(store.records()))


def test_cached_table_equals_the_records_and_follows_new_trials(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path) as store:
        store.commit(record("k1"))
        store.commit(record("k2", attempt=1))
        store.commit(record("k2", attempt=2))
    first = load_run(tmp_path).trials
    assert (tmp_path / table_cache.CACHE_NAME).is_file()
    pd.testing.assert_frame_equal(load_run(tmp_path).trials, first)
    pd.testing.assert_frame_equal(first, _records_table(tmp_path))
    with Store.open_for_writing(tmp_path) as store:
        store.commit(record("k3"))
    assert sorted(load_run(tmp_path).trials["trial_key"]) == ["k1", "k2", "k3"]


def test_a_foreign_or_torn_cache_is_ignored(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path) as store:
        store.commit(record("k1"))
    path = tmp_path / table_cache.CACHE_NAME
    path.write_bytes(b"not an archive")
    assert load_run(tmp_path).trials["trial_key"].tolist() == ["k1"]
    head = {"version": [1, 1], "code": "another", "dtypes": {}, "arrays": []}
    np.savez(path, head=np.frombuffer(json.dumps(head).encode(), np.uint8))
    assert table_cache.read(tmp_path, (1, 1)) is None
    assert load_run(tmp_path).trials["trial_key"].tolist() == ["k1"]


def test_a_record_that_does_not_read_is_named(tmp_path: Path) -> None:
    """A store from elsewhere, edited by hand: the table names the trial and what is wrong."""
    with Store.open_for_writing(tmp_path) as store:
        store.commit(record("k1"))
        store.commit(record("k2"))
    db = sqlite3.connect(tmp_path / "run.db")
    with db:
        raw = json.loads(db.execute("SELECT record FROM trials WHERE trial_key='k2'").fetchone()[0])
        del raw["telemetry"]
        db.execute("UPDATE trials SET record=? WHERE trial_key='k2'", (json.dumps(raw),))
    db.close()
    with pytest.raises(StoreError, match=r"trial k2 does not load: (.|\n)*telemetry"):
        load_run(tmp_path)
    with sqlite3.connect(tmp_path / "run.db") as db:
        db.execute("UPDATE trials SET record='[1, 2]' WHERE trial_key='k2'")
    with pytest.raises(StoreError, match="not a trial's"):
        load_run(tmp_path)
