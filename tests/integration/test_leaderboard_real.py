"""The real leaderboard, as a user meets it: the 55 shared Terminal-Bench 2.0 submissions
extracted, imported with `levelfield import harbor` in one call, then `levelfield leaderboard`.
Everything it says is recomputed here straight from the result.json files, with the
leaderboard's own convention (mean over tasks of the task's mean reward, a missing reward
counting 0), its own stderr formula, fractions for the ranks, and scipy's paired t-tests with
statsmodels' Holm for the rank sets; the page is measured in headless Chromium."""

from __future__ import annotations

import gc
import json
import math
import os
import re
import subprocess
import sys
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration._chromium import chromium, find_browser, measured
from tests.unit.test_ranks import holm_reference

pytestmark = pytest.mark.slow

LEVELFIELD = [sys.executable, "-m", "levelfield"]
AGENT_TYPES = {"AgentTimeoutError", "NonZeroAgentExitCodeError", "BadRequestError"}


@pytest.fixture(scope="module")
def imported(tb2_leaderboard: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = tmp_path_factory.mktemp("tb2-run") / "run"
    done = subprocess.run(
        [*LEVELFIELD, "import", "harbor", str(tb2_leaderboard), "--out", str(run)],
        check=True,
        capture_output=True,
        text=True,
    )
    return run, done.stdout


@pytest.fixture(scope="module")
def board(imported: tuple[Path, str], tb2_leaderboard: Path) -> tuple[dict, Path]:
    out = subprocess.run(
        [*LEVELFIELD, "leaderboard", str(imported[0]), "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout), tb2_leaderboard


@pytest.fixture(scope="module")
def files(tb2_leaderboard: Path) -> dict[str, Any]:
    """Every result.json, read with json: trials per submission, and what the others are."""
    trials: dict[str, list[dict[str, Any]]] = defaultdict(list)
    kinds: dict[str, int] = defaultdict(int)
    for dirpath, _dirs, names in os.walk(tb2_leaderboard):
        if "result.json" in names:
            data = json.loads(Path(dirpath, "result.json").read_text())
            if isinstance(data.get("task_name"), str) and isinstance(data.get("trial_name"), str):
                trials[Path(dirpath).relative_to(tb2_leaderboard).parts[0]].append(data)
                kinds["trials"] += 1
            else:
                kinds["job summaries" if "stats" in data else "others"] += 1
    return {"trials": trials, "kinds": kinds}


def reward(trial: dict[str, Any]) -> float | None:
    value = ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward")
    return value if type(value) in (int, float) and 0 <= value <= 1 else None


def is_infra(trial: dict[str, Any]) -> bool:
    kind = (trial.get("exception_info") or {}).get("exception_type")
    return reward(trial) is None and kind not in AGENT_TYPES


def by_task(trials: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Trials per task, named as the submissions' names pair up: no dataset prefix, and
    `install-windows-3.11` is `install-windows-3-11`."""
    tasks: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in trials:
        tasks[re.sub(r"[._\s]+", "-", t["task_name"].split("/")[-1].lower())].append(t)
    return tasks


def exact_score(trials: list[dict[str, Any]], clean: bool = False) -> Fraction:
    """Mean over tasks of passes / K (clean: over the task's trials that are not infra
    errors, tasks without one left out), in fractions."""
    parts = []
    for group in by_task(trials).values():
        counted = [t for t in group if not (clean and is_infra(t))]
        if counted:
            parts.append(Fraction(sum(reward(t) == 1.0 for t in counted), len(counted)))
    return sum(parts, Fraction(0)) / len(parts)


def ranks(scores: dict[str, Fraction]) -> dict[str, int]:
    return {k: 1 + sum(v > s for v in scores.values()) for k, s in scores.items()}


def test_the_shared_leaderboard_ranked_with_the_boards_own_scores(board: tuple[dict, Path]) -> None:
    result, data = board
    entries = {e["label"]: e for e in result["entries"]}
    assert len(entries) == 55
    rewards: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for path in data.glob("*/*/*/result.json"):
        trial = json.loads(path.read_text())
        if "task_name" not in trial:
            continue
        value = ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward")
        rewards[path.parts[-4]][trial["task_name"].split("/")[-1]].append(
            0.0 if value is None else float(value)
        )
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


def test_every_result_file_found_is_counted(
    imported: tuple[Path, str], files: dict[str, Any]
) -> None:
    kinds = files["kinds"]
    assert kinds["trials"] > 23_000 and kinds["job summaries"] > 100 and kinds["others"] == 0
    found = sum(kinds.values())
    line = " ".join(imported[1].split())  # rich wraps long lines
    assert (
        f"{found} result.json found: {kinds['trials']} trials imported of 55 submissions, "
        f"0 already there, {kinds['job summaries']} job summaries, 0 skipped"
    ) in line


def test_exact_ties_share_their_rank_and_clean_rank(
    board: tuple[dict, Path], files: dict[str, Any]
) -> None:
    entries = {e["label"]: e for e in board[0]["entries"]}
    scores = {s: exact_score(t) for s, t in files["trials"].items()}
    clean = {s: exact_score(t, clean=True) for s, t in files["trials"].items()}
    tied = [s for s in scores if sum(v == scores[s] for v in scores.values()) > 1]
    assert len(tied) >= 10  # 349/445 three times, 376/445 twice...: the test has ties to bite
    assert {s: e["rank"] for s, e in entries.items()} == ranks(scores)
    assert {s: e["clean_rank"] for s, e in entries.items()} == ranks(clean)
    order = [e["label"] for e in board[0]["entries"]]
    assert order == sorted(order, key=lambda s: (-scores[s], s))


def test_rank_sets_and_tiers_are_holms_and_take_no_seed(
    board: tuple[dict, Path], files: dict[str, Any]
) -> None:
    """The rank sets are computed, not drawn: they equal a reference with no randomness at all,
    so no seed or number of draws can move them."""
    result = board[0]
    labels = result["ranks"]["labels"]
    grouped = {s: by_task(files["trials"][s]) for s in labels}
    tasks = sorted(grouped[labels[0]])
    matrix = np.array(
        [[np.mean([reward(t) == 1.0 for t in grouped[s][task]]) for s in labels] for task in tasks]
    )
    gc.freeze()  # statsmodels' Holm calls gc.collect(): not through every file read above
    try:
        better, simultaneous, marginal = holm_reference(matrix, result["level"])
    finally:
        gc.unfreeze()
    proven = {(labels[j], labels[k]) for j, k in better}
    assert {tuple(pair) for pair in result["ranks"]["proven_better"]} == proven
    assert [tuple(s) for s in result["ranks"]["simultaneous"]] == simultaneous
    assert [tuple(m) for m in result["ranks"]["marginal"]] == marginal
    tier: dict[str, int] = {}
    for s in sorted(labels, key=lambda s: -matrix[:, labels.index(s)].mean()):
        tier[s] = 1 + max((tier[a] for a, b in proven if b == s), default=0)
    assert dict(zip(labels, result["ranks"]["tier"], strict=True)) == tier
    assert not {"seed", "n_draws"} & set(result["ranks"])
    assert 700 < len(proven) < 800


def test_the_infra_error_rate_is_the_mean_over_tasks_and_nothing_rests_on_unclassified(
    board: tuple[dict, Path], files: dict[str, Any]
) -> None:
    for e in board[0]["entries"]:
        shares = [
            sum(map(is_infra, group)) / len(group)
            for group in by_task(files["trials"][e["label"]]).values()
        ]
        assert e["infra_error_rate"] == pytest.approx(sum(shares) / len(shares), abs=1e-12)
        assert sum(e["infra_by_kind"].values()) == pytest.approx(e["infra_error_rate"])
        # every exception of the shared submissions is one the import's table knows
        # (tests/unit/test_harbor_reasons.py), so no clean score rests on an unclassified one
        assert e["unclassified_rate"] == 0.0
        assert e["clean_rank_if_agents"] == e["clean_rank"]


def test_the_page_fits_its_window_and_the_forest_keeps_its_width(
    imported: tuple[Path, str], tmp_path: Path
) -> None:
    """At 1,600 pixels every column of the table is on screen, the longest submission name
    (90 characters) included, and the forest plot keeps most of its figure's width. A
    screenshot is written for a human to look at (LEVELFIELD_SCREENSHOT names where)."""
    browser, width = find_browser(), 1600
    page = tmp_path / "leaderboard.html"
    subprocess.run(
        [*LEVELFIELD, "leaderboard", str(imported[0]), "--html", str(page)],
        check=True,
        capture_output=True,
    )
    script = (
        "const table=document.querySelector('table.board');"
        "const svg=document.querySelector('#fig-forest');"
        "window.measured={window:window.innerWidth,"
        "columns:Array.from(table.querySelectorAll('th')).map("
        "th=>[th.textContent,th.getBoundingClientRect().right]),"
        "svg:svg.getBoundingClientRect().width,"
        "axes:svg.querySelector('#patch_2').getBoundingClientRect().width}"
    )
    seen = measured(browser, page, script, width, tmp_path / "profile")
    assert seen["window"] == width
    right = dict(seen["columns"])
    assert {"clean (rank)", "infra", "provider"} <= set(right)
    assert max(right.values()) <= width, right
    assert seen["axes"] >= 0.6 * seen["svg"], seen
    assert re.search(r"Junie_CLI__Gemini-3-Flash-Preview-Gemini-3\.1", page.read_text())
    shot = Path(os.environ.get("LEVELFIELD_SCREENSHOT", tmp_path / "leaderboard.png"))
    done = chromium(
        browser,
        tmp_path / "profile",
        f"--window-size={width},3000",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    assert done.returncode == 0 and shot.stat().st_size > 50_000
