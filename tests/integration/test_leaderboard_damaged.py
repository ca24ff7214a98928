"""Real submissions damaged on purpose, in a temporary copy: the ways a leaderboard's files go
wrong, each of which the import must count and say, never hide or score as a pass. Four of the
shared submissions, imported with `levelfield import harbor` in one call:

- Droid__GPT-5.3-Codex with its first job copied under another name (a copy inside a
  submission);
- MAYA__Claude-4.5-sonnet, whose five real jobs agree on every task, with the trials of six
  tasks removed from its last job (uneven K, on tasks with infra errors);
- Mux__Claude-Opus-4.5 with five passing trials' rewards made 2.0, -1, true, "1.0" and NaN, one
  trial without a task_name and one whose task_name is 42;
- OpenCode__Claude-Opus-4.5 kept outside the board and linked in by a symlink, 31 of its failed
  trials rewritten to end in "RuntimeError: Command timed out after 60 seconds" with no reward
  (an exception no table knows); beside it a second link to Mux's folder, read already, and a
  broken link.

Expectations are computed from the files with json and fractions, never from levelfield."""

from __future__ import annotations

import json
import os
import shutil
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from levelfield.cli.app import app

pytestmark = pytest.mark.slow

DROID, MAYA, MUX, OPENCODE = (
    "Droid__GPT-5.3-Codex",
    "MAYA__Claude-4.5-sonnet",
    "Mux__Claude-Opus-4.5",
    "OpenCode__Claude-Opus-4.5",
)
BAD_REWARDS = {  # JSON text written as the reward → the words the import must use
    "2.0": "is 2.0: outside the reward's range [0, 1], so not a pass",
    "-1": "is -1: outside the reward's range [0, 1], so not a pass",
    "true": "is true: a boolean, not a number, so not a pass",
    '"1.0"': 'is "1.0": a string, not a number, so not a pass',
    "NaN": "is NaN: not a number (NaN), so not a pass",
}
UNKNOWN = ("RuntimeError", "Command timed out after 60 seconds")
AGENT_TYPES = {"AgentTimeoutError", "NonZeroAgentExitCodeError"}


def trial_dirs(folder: Path) -> list[Path]:
    return sorted(p.parent for p in folder.glob("*/*/result.json"))


def rewrite(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def passing(trial: Path) -> bool:
    data = json.loads((trial / "result.json").read_text())
    return ((data.get("verifier_result") or {}).get("rewards") or {}).get("reward") == 1.0


@pytest.fixture(scope="module")
def board(tb2_leaderboard: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("damaged")
    board, elsewhere = root / "board", root / "elsewhere"
    for name in (DROID, MAYA, MUX):
        shutil.copytree(tb2_leaderboard / name, board / name)
    shutil.copytree(tb2_leaderboard / OPENCODE, elsewhere / OPENCODE)
    (board / OPENCODE).symlink_to(elsewhere / OPENCODE)
    (board / "alias-of-mux").symlink_to(board / MUX)
    (board / "gone").symlink_to(root / "nowhere")

    first = sorted(p for p in (board / DROID).iterdir() if p.is_dir())[0]
    shutil.copytree(first, board / DROID / f"{first.name}-copy")

    last = sorted(p for p in (board / MAYA).iterdir() if p.is_dir())[-1]
    infra_tasks = sorted(
        {t.name.split("__")[0] for t in trial_dirs(board / MAYA) if not _graded(t)}
    )
    removed = [*infra_tasks, "fix-git", "regex-log", "sqlite-with-gcov"][:6]
    for trial in trial_dirs(board / MAYA):
        if trial.parent == last and trial.name.split("__")[0] in removed:
            shutil.rmtree(trial)

    mux = [t for t in trial_dirs(board / MUX) if passing(t)]
    damaged = {}
    for trial, text in zip(mux, BAD_REWARDS, strict=False):
        raw = (trial / "result.json").read_text()
        data = json.loads(raw)
        data["verifier_result"]["rewards"]["reward"] = "__BAD__"
        (trial / "result.json").write_text(json.dumps(data).replace('"__BAD__"', text))
        damaged[data["trial_name"]] = text
    no_name, number_name = mux[5] / "result.json", mux[6] / "result.json"
    rewrite(no_name, lambda d: d.pop("task_name"))
    rewrite(number_name, lambda d: d.update(task_name=42))

    failed = [t for t in trial_dirs(elsewhere / OPENCODE) if not passing(t) and _graded(t)]
    for trial in failed[:31]:
        rewrite(
            trial / "result.json",
            lambda d: d.update(
                verifier_result=None,
                exception_info={"exception_type": UNKNOWN[0], "exception_message": UNKNOWN[1]},
            ),
        )
    run = root / "run"
    result = CliRunner().invoke(app, ["import", "harbor", str(board), "--out", str(run)])
    assert result.exit_code == 0, result.output
    return {
        "root": board,
        "run": run,
        "stdout": " ".join(result.stdout.split()),
        "stderr": " ".join(result.stderr.split()),
        "damaged": damaged,
        "skipped": (no_name, number_name),
        "unknown": 31,
    }


def _graded(trial: Path) -> bool:
    data = json.loads((trial / "result.json").read_text())
    return ((data.get("verifier_result") or {}).get("rewards") or {}).get("reward") is not None


@pytest.fixture(scope="module")
def files(board: dict[str, Any]) -> dict[str, Any]:
    """Every result.json reachable from the board, each real file once, read with json."""
    seen: dict[str, Any] = {}
    trials: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for dirpath, _dirs, names in os.walk(board["root"], followlinks=True):
        if "result.json" not in names:
            continue
        real = os.path.realpath(os.path.join(dirpath, "result.json"))
        if real in seen:
            continue
        seen[real] = data = json.loads(Path(real).read_text(), parse_constant=float)
        if isinstance(data.get("task_name"), str) and "trial_name" in data:
            trials[Path(dirpath).relative_to(board["root"]).parts[0]].append(data)
    summaries = sum(1 for d in seen.values() if "stats" in d and "trial_name" not in d)
    return {"found": len(seen), "summaries": summaries, "trials": trials}


def reward(trial: dict[str, Any]) -> float | None:
    value = ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward")
    valid = type(value) in (int, float) and value == value and 0 <= value <= 1
    return value if valid else None


def exception(trial: dict[str, Any]) -> tuple[str | None, str | None]:
    info = trial.get("exception_info") or {}
    return info.get("exception_type"), info.get("exception_message")


def is_infra(trial: dict[str, Any]) -> bool:
    return reward(trial) is None and exception(trial)[0] not in AGENT_TYPES


def per_task(trials: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        tasks[t["task_name"].split("/")[-1]].append(t)
    return tasks


def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_every_file_found_is_imported_or_skipped_with_its_reason(
    board: dict[str, Any], files: dict[str, Any]
) -> None:
    trials = sum(map(len, files["trials"].values()))
    assert files["found"] == trials + files["summaries"] + 2
    assert (
        f"{files['found']} result.json found: {trials} trials imported of 4 submissions, 0 "
        f"already there, {files['summaries']} job summaries, 2 skipped, 2 folders not read"
    ) in board["stdout"]
    no_name, number_name = map(str, board["skipped"])
    assert f"{no_name}: not a Harbor trial result: no task_name" in board["stderr"]
    assert (
        f"{number_name}: not a Harbor trial result: task_name is 42, not a string"
        in (board["stderr"])
    )
    assert f"{board['root']}/alias-of-mux: a symlink to" in board["stderr"]
    assert "a folder read already: read once" in board["stderr"]
    assert f"{board['root']}/gone: a broken symlink to" in board["stderr"]
    # the symlinked submission is read under its link's name, every trial of it
    assert len(files["trials"][OPENCODE]) == 89
    assert f"flag {OPENCODE}" in board["stdout"] or OPENCODE in invoke(
        "leaderboard", str(board["run"]), "--markdown"
    )


@pytest.fixture(scope="module")
def results(board: dict[str, Any]) -> list[dict[str, Any]]:
    """`results --json` read by a strict parser: NaN, Infinity and -Infinity are refused."""

    def refuse(token: str) -> None:
        raise ValueError(f"not JSON: {token}")

    return json.loads(invoke("results", str(board["run"]), "--json"), parse_constant=refuse)


def test_no_invalid_reward_is_a_pass_and_each_is_named_in_its_words(
    board: dict[str, Any], results: list[dict[str, Any]]
) -> None:
    mux = {r["harbor"]["trial_name"]: r for r in results if r["agent"] == MUX}
    for name, text in board["damaged"].items():
        record = mux[name]
        assert (record["outcome"], record["reason"]) == ("infra_error", "verifier_error"), text
        assert record["reward"] is None
        said = " ".join(record["evidence"]["notes"])
        assert f"verifier_result.rewards.reward {BAD_REWARDS[text]}" in said
    assert all(r["reward"] == 1.0 for r in results if r["outcome"] == "passed")
    flags = board["stdout"]
    assert f"flag {MUX}: invalid_rewards: 5 trials have a reward that is not a number" in flags


def test_copies_inside_a_submission_are_flagged_and_no_k_is_called_unusual(
    board: dict[str, Any],
) -> None:
    said = board["stdout"]
    assert f"flag {MAYA}: copied_attempts: 0 of 89 tasks vary across its attempts" in said
    copy = next(p.name for p in (board["root"] / DROID).iterdir() if p.name.endswith("-copy"))
    assert f"flag {DROID}: copied_attempts: jobs with identical per-task outcomes:" in said
    assert f"and {copy} on all 89 common tasks" in said
    # K = 6, uneven, 1 and 1: no value is held by most of the four submissions
    assert "unusual_k" not in said
    assert f"flag {OPENCODE}: copied_attempts" not in said and f"flag {MUX}: copied" not in said


@pytest.fixture(scope="module")
def leaderboard(board: dict[str, Any]) -> dict[str, Any]:
    return json.loads(invoke("leaderboard", str(board["run"]), "--json"))


def test_infra_error_rate_is_one_thing_in_report_and_leaderboard(
    board: dict[str, Any], files: dict[str, Any], leaderboard: dict[str, Any]
) -> None:
    report = json.loads(invoke("report", str(board["run"]), "--json"))
    in_report = {
        c["labels"]["agent"]: c["infra_error_rate"]["estimate"]["mean"] for c in report["configs"]
    }
    for entry in leaderboard["entries"]:
        tasks = per_task(files["trials"][entry["label"]])
        shares = [sum(map(is_infra, group)) / len(group) for group in tasks.values()]
        expected = sum(shares) / len(shares)
        assert entry["infra_error_rate"] == pytest.approx(expected, abs=1e-12), entry["label"]
        assert in_report[entry["label"]] == pytest.approx(expected, abs=1e-12)
    maya = [t for group in per_task(files["trials"][MAYA]).values() for t in group]
    share_of_trials = sum(map(is_infra, maya)) / len(maya)
    entries = {e["label"]: e for e in leaderboard["entries"]}
    assert abs(entries[MAYA]["infra_error_rate"] - share_of_trials) > 1e-4  # uneven K: they differ


def test_clean_ranks_say_what_rests_on_unclassified_exceptions(
    board: dict[str, Any], files: dict[str, Any], leaderboard: dict[str, Any]
) -> None:
    def clean(trials: list[dict[str, Any]], unknown_is_agents: bool) -> Fraction:
        parts = []
        for group in per_task(trials).values():
            counted = [
                t
                for t in group
                if not is_infra(t) or (unknown_is_agents and exception(t) == UNKNOWN)
            ]
            if counted:
                parts.append(Fraction(sum(reward(t) == 1.0 for t in counted), len(counted)))
        return sum(parts, Fraction(0)) / len(parts)

    def ranks(scores: dict[str, Fraction]) -> dict[str, int]:
        return {k: 1 + sum(v > s for v in scores.values()) for k, s in scores.items()}

    trials = files["trials"]
    as_is = ranks({s: clean(t, False) for s, t in trials.items()})
    if_agents = {s: clean(t, True) for s, t in trials.items()}
    entries = {e["label"]: e for e in leaderboard["entries"]}
    for label, entry in entries.items():
        unknown = [
            sum(exception(t) == UNKNOWN for t in g) / len(g)
            for g in per_task(trials[label]).values()
        ]
        assert entry["unclassified_rate"] == pytest.approx(sum(unknown) / len(unknown))
        assert entry["clean_rank"] == as_is[label]
        assert entry["clean_if_agents"] == pytest.approx(float(if_agents[label]), abs=1e-12)
        assert entry["clean_rank_if_agents"] == ranks(if_agents)[label]
    assert entries[OPENCODE]["unclassified_rate"] == pytest.approx(31 / 89)
    assert entries[OPENCODE]["clean_rank"] < entries[OPENCODE]["clean_rank_if_agents"]
    markdown = invoke("leaderboard", str(board["run"]), "--markdown")
    after = markdown.split("† Clean scores resting on unclassified exceptions", 1)[1]
    table = after.split("\n\n")[1]  # the title's line, then this table up to the next blank
    (row,) = [line for line in table.splitlines() if line.startswith(f"| {OPENCODE} |")]
    e = entries[OPENCODE]
    assert row == (
        f"| {OPENCODE} | 34.8 | {100 * e['clean_score']['mean']:.1f} ({e['clean_rank']}) | "
        f"{100 * e['clean_if_agents']:.1f} ({e['clean_rank_if_agents']}) |"
    )
