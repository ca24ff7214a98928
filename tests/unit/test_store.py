import json
import sqlite3
from pathlib import Path

import pytest

from levelfield.errors import StoreError
from levelfield.records import Evidence, HostContext, Outcome, Reason, Telemetry, TrialRecord
from levelfield.store import Store, load_record, reading


def record(key: str, attempt: int = 1) -> TrialRecord:
    host = HostContext(
        host_id="h",
        started_at="2026-01-01T00:00:00+00:00",
        local_hour=0,
        load1=0.1,
        free_memory_bytes=1,
        trials_in_flight=1,
    )
    return TrialRecord(
        trial_key=key,
        run_id="r",
        task="t",
        agent="oracle",
        policy="strict",
        repeat=1,
        attempt=attempt,
        backend="process",
        outcome=Outcome.PASSED,
        reason=Reason.TESTS_PASSED,
        reward=1.0,
        limits={},
        evidence=Evidence(),
        telemetry=Telemetry(host=host),
        started_at="2026-01-01T00:00:00+00:00",
        finished_at="2026-01-01T00:00:01+00:00",
        duration_s=0.1,
    )


def test_records_are_committed_and_read_back_with_a_second_reader(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path) as store:
        store.commit(record("k1"))
        store.commit(record("k2"))
        with reading(tmp_path) as reader:  # WAL: readers see committed trials during a run
            assert {r.trial_key for r in reader.records()} == {"k1", "k2"}
    rows = sqlite3.connect(tmp_path / "run.db").execute("SELECT COUNT(*) FROM trials").fetchone()
    assert rows == (2,)


def test_a_trial_is_stored_once_per_attempt(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path) as store:
        store.commit(record("k1"))
        store.commit(record("k1", attempt=2))  # a retry is kept beside the first attempt
        with pytest.raises(StoreError, match="already stored"):
            store.commit(record("k1"))
        assert store.stored_keys() == {"k1"} and store.count() == 2


def test_a_second_live_writer_is_refused(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path), pytest.raises(StoreError, match="another live"):
        Store.open_for_writing(tmp_path)
    Store.open_for_writing(tmp_path).close()  # the lock went with its holder


def test_meta_and_plans_round_trip(tmp_path: Path) -> None:
    with Store.open_for_writing(tmp_path) as store:
        store.set_meta({"run_id": "abc", "policies": {"strict": {}}})
        store.set_meta({"run_id": "abc", "concurrency": 2})
        store.add_plan("default", 3, "now", ["k2", "k1"])
        assert store.meta() == {"run_id": "abc", "policies": {"strict": {}}, "concurrency": 2}
        assert store.plans()[0]["trial_keys"] == ["k2", "k1"]


def test_schema_versions(tmp_path: Path) -> None:
    data = json.loads(record("k").model_dump_json())
    del data["schema_version"]
    assert load_record(json.dumps(data)).schema_version == 1  # no version means v1
    data["schema_version"] = 2
    with pytest.raises(StoreError, match="newer"):
        load_record(json.dumps(data))


def test_reading_a_directory_without_a_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no run here"):
        Store.open_for_reading(tmp_path)
