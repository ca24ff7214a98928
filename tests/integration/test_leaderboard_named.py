"""Nothing found under a leaderboard is left unsaid: two real submissions in a temporary copy,
damaged on purpose, imported with `levelfield import harbor`, then `levelfield leaderboard`.

- Ante__Gemini-3-Pro-Preview with one passing trial's result.json cut to its first 300 bytes
  (a trial that ran and cannot be read), and a trial folder whose result.json is a symlink to
  another of its trials' files;
- Capy__GPT-5.5 with one failing trial given an exception no table knows,
  `InfraBootstrapFailure`, whose message says infrastructure;
- beside them three folders that hold no trial: an empty one, one with only a job's summary,
  one with files of another format.

Expected scores are computed from the files with json and fractions, never from levelfield."""

from __future__ import annotations

import json
import re
import shutil
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from levelfield.cli.app import app

pytestmark = pytest.mark.slow

ANTE, CAPY = "Ante__Gemini-3-Pro-Preview", "Capy__GPT-5.5"
UNKNOWN = ("InfraBootstrapFailure", "infrastructure bootstrap failed before the agent started")


def trial_dirs(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("*/*/result.json"))


def reward_of(data: dict[str, Any]) -> float | None:
    return ((data.get("verifier_result") or {}).get("rewards") or {}).get("reward")


def task_of(name: str) -> str:
    return re.sub(r"[._\s]+", "-", name.split("/")[-1].lower())


@pytest.fixture(scope="module")
def damaged(tb2_leaderboard: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("named")
    board = root / "board"
    for name in (ANTE, CAPY):
        shutil.copytree(tb2_leaderboard / name, board / name)
    # the expected score: every trial of the original files, the cut one counting 0
    ante = trial_dirs(board / ANTE)
    rewards = {t: reward_of(json.loads((t / "result.json").read_text())) for t in ante}
    cut = next(t for t in ante if rewards[t] == 1.0)
    tasks: dict[str, list[float]] = defaultdict(list)
    for trial in ante:
        data = json.loads((trial / "result.json").read_text())
        counted = 0.0 if trial == cut else (rewards[trial] or 0.0)
        tasks[task_of(data["task_name"])].append(counted)
    expected = sum((Fraction(sum(v)) / len(v) for v in tasks.values()), Fraction(0)) / len(tasks)
    raw = (cut / "result.json").read_bytes()
    (cut / "result.json").write_bytes(raw[:300])
    linked = cut.parent / f"{cut.name.split('__')[0]}__Zlinked"
    linked.mkdir()
    (linked / "result.json").symlink_to(ante[-1] / "result.json")

    capy = trial_dirs(board / CAPY)
    failing = next(t for t in capy if reward_of(json.loads((t / "result.json").read_text())) == 0)
    data = json.loads((failing / "result.json").read_text())
    data["exception_info"] = {"exception_type": UNKNOWN[0], "exception_message": UNKNOWN[1]}
    (failing / "result.json").write_text(json.dumps(data))

    (board / "Empty__Model").mkdir()
    summary = next((board / CAPY).glob("*/result.json"))
    (board / "SummaryOnly__Model" / "job").mkdir(parents=True)
    shutil.copy(summary, board / "SummaryOnly__Model" / "job" / "result.json")
    other = board / "TB1__Model" / "run-1"
    other.mkdir(parents=True)
    (other / "results.json").write_text('{"accuracy": 0.5}')
    (other / "tb.lock").write_text("lock")

    run = root / "run"
    result = CliRunner().invoke(app, ["import", "harbor", str(board), "--out", str(run)])
    assert result.exit_code == 0, result.output  # a named skip is no error
    board_json = CliRunner().invoke(app, ["leaderboard", str(run), "--json"])
    assert board_json.exit_code == 0, board_json.output
    text = CliRunner().invoke(app, ["leaderboard", str(run)], terminal_width=400)
    return {
        "board": board,
        "run": run,
        "out": " ".join(result.output.split()),
        "json": json.loads(board_json.stdout),
        "text": " ".join(text.output.split()),
        "expected": expected,
        "cut": cut,
        "linked": linked,
        "n_ante": len(ante),
    }


def entry(board: dict[str, Any], label: str) -> dict[str, Any]:
    return next(e for e in board["entries"] if e["label"] == label)


def test_every_submission_folder_is_imported_or_named_with_its_reason(damaged: dict) -> None:
    out, board = damaged["out"], damaged["json"]
    root = damaged["board"]
    named = "Empty__Model, SummaryOnly__Model, TB1__Model"
    assert f"3 submission folders without a trial ({named})" in out
    assert f"{root / 'Empty__Model'}: an empty folder" in out
    assert f"{root / 'SummaryOnly__Model'}: only a job's summary, no trial folder" in out
    assert f"{root / 'TB1__Model'}: no Harbor result.json: 2 files (.json 1, .lock 1)" in out
    assert {Path(k).name for k in board["not_ranked"]} == {
        "Empty__Model",
        "SummaryOnly__Model",
        "TB1__Model",
    }
    assert board["info"]["import_skipped"]["submissions"] == board["not_ranked"]
    assert "Not ranked: 3 submission folders" in damaged["text"]


def test_an_unreadable_trial_counts_as_a_trial_without_a_reward(damaged: dict) -> None:
    ante = entry(damaged["json"], ANTE)
    assert ante["n_trials"] == damaged["n_ante"]  # the cut one is in, the link is not
    assert ante["score"]["mean"] == pytest.approx(float(damaged["expected"]), abs=1e-12)
    (flag,) = [f for f in ante["flags"] if f["kind"] == "unreadable_trials"]
    assert damaged["cut"].name in flag["detail"] and flag["detail"].startswith("1 trials")
    assert f"Flag on {ANTE}: unreadable_trials:" in damaged["text"]
    assert ante["infra_by_kind"].get("harness_error", 0) > 0


def test_a_symlinked_result_file_is_not_a_second_trial(damaged: dict) -> None:
    assert f"{damaged['linked']}: its result.json is a symlink to" in damaged["out"]
    assert "a trial's file read already: not a second trial" in damaged["out"]


def test_an_unknown_exception_is_booked_as_infra_and_in_the_dagger_table(damaged: dict) -> None:
    capy = entry(damaged["json"], CAPY)
    assert capy["unclassified_rate"] > 0
    assert capy["infra_by_kind"].get("harness_error", 0) > 0
    assert capy["clean_if_agents"] < capy["clean_score"]["mean"]
    assert "† Clean scores resting on unclassified exceptions" in damaged["text"]


def test_every_import_flag_is_repeated_per_entry(damaged: dict) -> None:
    board = damaged["json"]
    flags = board["info"]["import_flags"]
    for e in board["entries"]:
        assert e["flags"] == flags.get(e["label"], [])
    assert any(e["flags"] for e in board["entries"])
    assert "Import flags, every one per entry" in damaged["text"]
