"""The real leaderboard, as a user meets it: the 55 shared Terminal-Bench 2.0 submissions
extracted, imported with `levelfield import harbor` in one call, then `levelfield leaderboard`.
Its scores and its ± are recomputed here straight from the result.json files, with the
leaderboard's own convention (mean over tasks of the task's mean reward, a missing reward
counting 0) and its own stderr formula."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def board(tb2_leaderboard: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    run = tmp_path_factory.mktemp("tb2-run") / "run"
    levelfield = [sys.executable, "-m", "levelfield"]
    subprocess.run(
        [*levelfield, "import", "harbor", str(tb2_leaderboard), "--out", str(run)], check=True
    )
    out = subprocess.run(
        [*levelfield, "leaderboard", str(run), "--json"], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout), tb2_leaderboard


def _rewards(data: Path) -> dict[str, dict[str, list[float]]]:
    """Per submission, per task (dataset prefix dropped), every trial's reward; missing = 0."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in data.glob("*/*/*/result.json"):
        trial = json.loads(path.read_text())
        if "task_name" not in trial:
            continue
        rewards = (trial.get("verifier_result") or {}).get("rewards") or {}
        reward = rewards.get("reward")
        task = trial["task_name"].split("/")[-1]
        found[path.parts[-4]][task].append(0.0 if reward is None else float(reward))
    return found


@pytest.mark.slow
def test_the_shared_leaderboard_ranked_with_the_boards_own_scores(board: tuple[dict, Path]) -> None:
    result, data = board
    entries = {e["label"]: e for e in result["entries"]}
    assert len(entries) == 55
    rewards = _rewards(data)
    deviations = []
    for label, tasks in rewards.items():
        means = [sum(r) / len(r) for r in tasks.values()]
        deviations.append(abs(entries[label]["score"]["mean"] - sum(means) / len(means)))
        if all(len(r) > 1 for r in tasks.values()):
            variance = sum(
                m * (1 - m) / (len(r) - 1) for m, r in zip(means, tasks.values(), strict=True)
            )
            assert entries[label]["retry_se"] == pytest.approx(math.sqrt(variance) / len(means))
    assert max(deviations) < 0.0005  # 0.05 points
    first = set(result["ranks"]["could_be_first"])
    assert first == {label for label, e in entries.items() if e["tier"] == 1}
    for e in entries.values():
        low, high = e["simultaneous"]
        assert low <= e["rank"] <= high
    assert 0 <= result["top_gaps_told_apart"] <= 19
    assert 0.02 < result["detectable"]["gap"] < 0.3
