"""The real leaderboard, as a user meets it: the 55 shared Terminal-Bench 2.0 submissions
extracted, imported with `levelfield import harbor` in one call, then `levelfield leaderboard`.
Everything it says is recomputed here straight from the result.json files, with the
leaderboard's own convention (mean over tasks of the task's mean reward, a missing reward
counting 0), its own stderr formula, fractions for the ranks, and scipy's paired t-tests with
statsmodels' Holm for the rank sets; the page is measured in headless Chromium."""

from __future__ import annotations

import gc
import itertools
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
KINDS = ("passed", "failed", "timeout", "error")
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


def test_every_import_flag_is_repeated_per_entry(board: tuple[dict, Path]) -> None:
    data, _ = board
    flags = data["info"]["import_flags"]
    assert flags and {e["label"] for e in data["entries"]} >= set(flags)
    for e in data["entries"]:
        assert e["flags"] == flags.get(e["label"], [])
    kinds = {f["kind"] for e in data["entries"] for f in e["flags"]}
    assert kinds >= {"task_versions", "agent_versions"}
    assert data["not_ranked"] == {}  # every shared submission has trials


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
        "window.measured={window:window.innerWidth,page:document.documentElement.scrollWidth,"
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
    assert seen["page"] <= width  # the tables below it too: the flags' details wrap
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


def _rates(files: dict[str, Any], label: str) -> dict[str, float]:
    """Each task's solve rate (passes over trials), straight from the result.json files."""
    return {
        task: float(np.mean([reward(t) == 1.0 for t in group]))
        for task, group in by_task(files["trials"][label]).items()
    }


def test_first_against_second_and_the_gap_it_would_need(
    board: tuple[dict, Path], files: dict[str, Any]
) -> None:
    from scipy.stats import norm

    result = board[0]
    first, (one, two) = result["first"], [e["label"] for e in result["entries"][:2]]
    assert (first["label"], first["second"]) == (one, two)
    a, b = _rates(files, one), _rates(files, two)
    d = np.array([a[t] - b[t] for t in sorted(a.keys() & b.keys())])
    se = d.std(ddof=1) / math.sqrt(d.size)
    family = 2 * len(result["entries"]) - 3  # each with the next and with #1, #1–#2 once
    assert first["family"] == family
    assert first["diff"] == pytest.approx(d.mean(), abs=1e-12)
    assert first["gap_needed"] == pytest.approx(norm.ppf(1 - 0.05 / (2 * family)) * se)
    top = next(g for g in result["gaps"] if g["to"] == "next")["pair"]
    assert first["p_vs_second"] == top["p_holm"] and first["proven"] == (top["p_holm"] < 0.05)
    assert not first["proven"] and first["gap_needed"] > first["diff"]  # the shared board's #1


def test_every_task_with_its_solve_rates_and_the_tasks_that_decide_the_top_gaps(
    board: tuple[dict, Path], files: dict[str, Any]
) -> None:
    result = board[0]
    labels = [e["label"] for e in result["entries"]]
    rates = {label: _rates(files, label) for label in labels}
    tasks = {r["task"]: r for r in result["tasks"]}
    assert set(tasks) == {t for by in rates.values() for t in by}
    for name, row in tasks.items():
        expected = {label: by[name] for label, by in rates.items() if name in by}
        assert row["solve_rate"] == pytest.approx(expected, abs=1e-12)
        solved = sum(rate > 0 for rate in expected.values())
        kind = "nobody" if solved == 0 else "everybody" if solved == len(expected) else ""
        assert (row["solved_by"], row["ran_by"], row["kind"]) == (solved, len(expected), kind)
    means = [r["mean_rate"] for r in result["tasks"]]
    assert means == sorted(means)  # hardest first
    assert {r["kind"] for r in result["tasks"]} == {"everybody", ""}  # each task solved by some
    assert len(result["deciding"]) == 4
    pairs = enumerate(itertools.pairwise(labels[:5]), start=1)
    for gap, (place, (a, b)) in zip(result["deciding"], pairs, strict=True):
        assert (gap["name"], gap["a"], gap["b"]) == (f"#{place} vs #{place + 1}", a, b)
        diffs = {t: rates[a][t] - rates[b][t] for t in rates[a].keys() & rates[b].keys()}
        differ = sorted((t for t in diffs if diffs[t] != 0), key=lambda t: (-abs(diffs[t]), t))
        assert gap["n_differ"] == len(differ) and gap["n_tasks"] == len(diffs)
        assert [t["task"] for t in gap["tasks"]] == differ[:5]
        assert gap["diff"] == pytest.approx(np.mean(list(diffs.values())), abs=1e-12)
        for t in gap["tasks"]:
            assert gap["name"] in tasks[t["task"]]["decides"]


def test_the_text_says_the_first_line_and_the_tasks(imported: tuple[Path, str]) -> None:
    out = subprocess.run(
        [*LEVELFIELD, "leaderboard", str(imported[0])],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
    ).stdout
    text = " ".join(out.split())
    assert "How sure is #1? " in text and "not proven; a gap of" in text
    assert "that no entry solved once" in text and "rests on the" in text
    assert "Tasks, hardest first" in text


def _kind(trial: dict[str, Any]) -> str:
    """How a trial ended, from its file alone: a pass, an ordinary failure (the tests ran, no
    exception), an agent timeout, or any other ending."""
    exception = (trial.get("exception_info") or {}).get("exception_type")
    if reward(trial) == 1.0:
        return "passed"
    if exception == "AgentTimeoutError":
        return "timeout"
    return "failed" if exception is None and reward(trial) is not None else "error"


def _most_common(values: list[Any]) -> str:
    found = [v for v in values if v]
    return max(sorted(set(found)), key=found.count) if found else "unknown"


def test_each_entry_with_its_agent_model_dates_and_outcome_profile(
    board: tuple[dict, Path], files: dict[str, Any]
) -> None:
    from datetime import datetime

    entries = board[0]["entries"]
    mixes = {}
    for e in entries:
        trials = files["trials"][e["label"]]
        agent, split, model = e["label"].partition("__")
        if not split:
            agent = _most_common([(t.get("agent_info") or {}).get("name") for t in trials])
            model = _most_common(
                [
                    ((t.get("agent_info") or {}).get("model_info") or {}).get("name")
                    or (t["config"].get("agent") or {}).get("model_name")
                    for t in trials
                ]
            )
        assert (e["agent"], e["model"]) == (agent, model)
        started = [datetime.fromisoformat(t["started_at"]) for t in trials if t.get("started_at")]
        assert datetime.fromisoformat(e["first_trial_at"]) == min(started)
        assert datetime.fromisoformat(e["last_trial_at"]) == max(started)
        kinds = [_kind(t) for t in trials]
        expected = {k: kinds.count(k) / len(kinds) for k in KINDS}
        assert e["profile"] == pytest.approx(expected, abs=1e-12)
        fails = {k: kinds.count(k) for k in ("failed", "timeout", "error")}
        mixes[e["label"]] = {k: v / sum(fails.values()) for k, v in fails.items()}
    median = {k: float(np.median([m[k] for m in mixes.values()])) for k in ("failed", "timeout")}
    no_timeouts = {
        label for label, m in mixes.items() if median["timeout"] >= 0.1 and m["timeout"] == 0
    }
    assert len(no_timeouts) >= 4  # OB-1 twice, MAYA twice: a way of failing they never show
    far = {e["label"] for e in entries if e["profile_far"]}
    assert no_timeouts <= far and len(far) < 10
    groups = {(g["by"], g["name"]): g for g in board[0]["groups"]}
    codex = [e for e in entries if e["model"].casefold() == "gpt-5.3-codex"]
    assert len(groups[("model", "GPT-5.3-Codex")]["entries"]) == len(codex) >= 10
    assert (
        groups[("agent", "Terminus2")]["best"]
        == max((e for e in entries if e["agent"] == "Terminus2"), key=lambda e: e["score"]["mean"])[
            "label"
        ]
    )
