"""Terminal-Bench 1.x import on a sample of the public TB1 board: each layout's score equals its
runs' own accuracy, and no personal field reaches the run."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from levelfield.records import Reason
from levelfield.tb1 import import_tb1, verdict

DATA = Path(__file__).parents[1] / "data" / "tb1"
BOARD = Path("/tmp/tb1/results")


def _scores(run: Path) -> dict[str, float]:
    con = sqlite3.connect(run / "run.db")
    rows = con.execute("select agent, task, outcome from trials").fetchall()
    per: dict[str, dict[str, list[float]]] = {}
    for agent, task, outcome in rows:
        per.setdefault(agent, {}).setdefault(task, []).append(float(outcome == "passed"))
    return {a: sum(sum(v) / len(v) for v in t.values()) / len(t) for a, t in per.items()}


@pytest.mark.parametrize("layout", ["run_folders", "task_folders", "run_level", "flat"])
def test_each_layout_scores_its_runs_accuracy(layout: str, tmp_path: Path) -> None:
    (submission,) = (DATA / layout).iterdir()  # a submission folder, as the board holds it
    result = import_tb1([submission], tmp_path / "run")
    scores = _scores(tmp_path / "run")
    assert set(scores) == set(result.runs) and len(scores) == 1
    for label, accuracy in result.runs.items():
        assert scores[label] == pytest.approx(sum(accuracy) / len(accuracy), abs=1e-12)


def test_no_personal_field_is_stored(tmp_path: Path) -> None:
    import_tb1([DATA / "run_level"], tmp_path / "run")
    for path in (tmp_path / "run").iterdir():
        assert b"sample-user" not in path.read_bytes(), path


def test_failure_modes_book_as_harbor_import_does() -> None:
    assert verdict(True, "agent_timeout")[0] is Reason.TESTS_PASSED
    assert verdict(False, "agent_timeout")[0] is Reason.AGENT_TIMEOUT
    assert verdict(None, "test_timeout")[0] is Reason.VERIFIER_TIMEOUT
    assert verdict(None, "parse_error")[0] is Reason.VERIFIER_ERROR
    assert verdict(False, "agent_installation_failed")[0] is Reason.TESTS_FAILED
    assert verdict(None, "unknown_agent_error")[0] is Reason.HARNESS_ERROR


@pytest.mark.skipif(not BOARD.is_dir(), reason="the whole TB1 board is not on this machine")
def test_the_whole_board_scores_its_runs_accuracy(tmp_path: Path) -> None:
    result = import_tb1([BOARD], tmp_path / "run")
    scores = _scores(tmp_path / "run")
    assert len(scores) == 13
    for label, accuracy in result.runs.items():
        assert scores[label] == pytest.approx(sum(accuracy) / len(accuracy), abs=1e-12)
