"""The 55 shared Terminal-Bench 2.0 leaderboard submissions imported as a real user would:
`levelfield import harbor` on the extracted archive, then scores, flags, compare and report.

Every expectation is computed here from the files themselves with json and statistics, never
from levelfield."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from levelfield.analysis import table_cache
from levelfield.analysis._tidy import rates_of
from levelfield.analysis.table import load_run, trials_frame
from levelfield.cli.app import app
from levelfield.store import reading

pytestmark = pytest.mark.slow

AGENT_TYPES = {"AgentTimeoutError", "NonZeroAgentExitCodeError", "BadRequestError"}


def read_submissions(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Every trial's raw result.json, by submission folder."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for dirpath, _dirs, files in os.walk(root):
        if "result.json" in files:
            data = json.loads(Path(dirpath, "result.json").read_text())
            if "trial_name" in data:
                found[Path(dirpath).relative_to(root).parts[0]].append(data)
    return found


def reward(trial: dict[str, Any]) -> float | None:
    return ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward")


def per_task_mean(trials: list[dict[str, Any]], value: Any) -> float:
    """The leaderboard's convention: each task's mean first, then the mean over tasks."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for t in trials:
        by_task[t["task_name"].split("/")[-1]].append(value(t))
    return 100 * statistics.mean(statistics.mean(v) for v in by_task.values())


@pytest.fixture(scope="module")
def raw(tb2_leaderboard: Path) -> dict[str, list[dict[str, Any]]]:
    return read_submissions(tb2_leaderboard)


@pytest.fixture(scope="module")
def imported(tb2_leaderboard: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    run = tmp_path_factory.mktemp("leaderboard") / "run"
    result = CliRunner().invoke(app, ["import", "harbor", str(tb2_leaderboard), "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run, result.output


@pytest.fixture(scope="module")
def trials(imported: tuple[Path, str]) -> pd.DataFrame:
    return load_run(imported[0]).trials


@pytest.fixture(scope="module")
def rates(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (submission, task): the rates every estimator starts from."""
    return rates_of(trials)


PAIR = ("Droid__GPT-5.3-Codex", "logos__claude-opus-4.6")


@pytest.fixture(scope="module")
def two_runs(tb2_leaderboard: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two real submissions, each imported into its own run."""
    root = tmp_path_factory.mktemp("two-runs")
    for name in PAIR:
        result = CliRunner().invoke(
            app, ["import", "harbor", str(tb2_leaderboard / name), "--out", str(root / name)]
        )
        assert result.exit_code == 0, result.output
    return [root / name for name in PAIR]


def test_every_trial_file_is_a_record_that_loads(
    imported: tuple[Path, str], trials: pd.DataFrame, raw: dict[str, list[dict[str, Any]]]
) -> None:
    """The import writes records without building them as models, and its table from the
    records it holds, unvalidated: each record must load through the store's validation, and
    the table the command left must be the table of the validated models, row for row."""
    assert (imported[0] / table_cache.CACHE_NAME).is_file()
    with reading(imported[0]) as store:
        records = list(store.records())
    assert len(records) == len(trials) == sum(map(len, raw.values()))
    assert trials.trial_key.is_unique
    pd.testing.assert_frame_equal(trials, trials_frame(records))


def test_every_score_is_the_leaderboards_own(
    rates: pd.DataFrame, raw: dict[str, list[dict[str, Any]]]
) -> None:
    """Mean over tasks of each task's mean reward, a missing reward counting 0, every trial in
    the folder counted: to 0.05 points for each of the 55 submissions."""
    ours = (100 * rates.groupby("agent")["score"].mean()).to_dict()
    expected = {s: per_task_mean(trials, lambda t: reward(t) or 0.0) for s, trials in raw.items()}
    assert len(expected) == 55 and set(ours) == set(expected)
    deviation = {s: abs(ours[s] - expected[s]) for s in expected}
    worst = max(deviation, key=deviation.get)  # type: ignore[arg-type]
    print(f"largest deviation {deviation[worst]:.2e} points ({worst})")
    assert deviation[worst] < 0.05
    assert expected["Droid__GPT-5.3-Codex"] == pytest.approx(77.3, abs=0.05)  # the public board


def test_infra_errors_are_the_infrastructures_exceptions_without_a_reward(
    rates: pd.DataFrame, raw: dict[str, list[dict[str, Any]]]
) -> None:
    def infra(t: dict[str, Any]) -> float:
        kind = (t.get("exception_info") or {}).get("exception_type")
        return float(kind is not None and kind not in AGENT_TYPES and reward(t) is None)

    ours = (100 * rates.groupby("agent")["infra_rate"].mean()).to_dict()
    for submission, trials in raw.items():
        assert ours[submission] == pytest.approx(per_task_mean(trials, infra), abs=1e-9)


def test_an_agent_timeout_whose_tests_pass_is_a_pass_with_its_timeout_kept(
    trials: pd.DataFrame, raw: dict[str, list[dict[str, Any]]]
) -> None:
    timed_out_passing = {
        (s, t["task_name"].split("/")[-1])
        for s, ts in raw.items()
        for t in ts
        if (t.get("exception_info") or {}).get("exception_type") == "AgentTimeoutError"
        and reward(t) == 1.0
    }
    assert len(timed_out_passing) > 100
    passed = trials[trials.status == "passed"]
    assert timed_out_passing <= set(zip(passed.agent, passed.task, strict=True))
    flagged = passed.error.fillna("").str.startswith("AgentTimeoutError")
    assert flagged.sum() == sum(
        1
        for ts in raw.values()
        for t in ts
        if (t.get("exception_info") or {}).get("exception_type") == "AgentTimeoutError"
        and reward(t) == 1.0
    )


def test_flags_match_what_the_files_show(
    imported: tuple[Path, str], raw: dict[str, list[dict[str, Any]]]
) -> None:
    from levelfield.store import reading

    with reading(imported[0]) as store:
        flags = {s: {f["kind"] for f in fs} for s, fs in store.meta()["import_flags"].items()}
    usual_k = Counter(len(ts) // len({t["task_name"] for t in ts}) for ts in raw.values())
    k_most, held = usual_k.most_common(1)[0]
    assert 2 * held > len(raw)  # "most submissions": a strict majority
    for submission, trials in raw.items():
        kinds = flags.get(submission, set())
        per_task = Counter(t["task_name"].split("/")[-1] for t in trials)
        ks = set(per_task.values())
        assert ("uneven_k" in kinds) == (len(ks) > 1), submission
        assert ("unusual_k" in kinds) == (ks != {k_most} and len(ks) == 1), submission
        outcomes: dict[str, set[bool]] = defaultdict(set)
        for t in trials:
            outcomes[t["task_name"].split("/")[-1]].add(reward(t) == 1.0)
        several = [task for task, n in per_task.items() if n >= 2]
        copied = len(several) >= 20 and all(len(outcomes[task]) == 1 for task in several)
        assert ("copied_attempts" in kinds) == copied, submission
        assert "invalid_rewards" not in kinds  # every reward of the shared files is 0 or 1
        models = {
            (t["agent_info"].get("model_info") or {}).get("name")
            or t["config"]["agent"].get("model_name")
            for t in trials
        } - {None}
        assert ("other_models" in kinds) == (len(models) > 1), submission
        names = Counter(t["trial_name"] for t in trials)
        assert ("duplicate_trials" in kinds) == (max(names.values()) > 1), submission
        assert submission in imported[1] or not kinds  # each flag is printed by the import
    assert "duplicate_outcomes" not in set().union(*flags.values())
    # one submission's five jobs have the same outcome on every task: 0 of 89 vary
    assert "copied_attempts" in flags["MAYA__Claude-4.5-sonnet"]


def test_compare_two_imported_submissions(
    two_runs: list[Path], raw: dict[str, list[dict[str, Any]]]
) -> None:
    """Compared by task; logos (which names tasks `terminal-bench/x`) pairs with Droid (which
    does not) on all 89."""
    result = CliRunner().invoke(app, ["compare", *map(str, two_runs), "--json"])
    assert result.exit_code == 0, result.output
    (pair,) = json.loads(result.output)["pairs"]
    assert (pair["a"], pair["b"]) == PAIR
    assert pair["estimate"]["n_tasks"] == 89
    scores = [per_task_mean(raw[n], lambda t: float(reward(t) == 1.0)) for n in PAIR]
    assert 100 * pair["estimate"]["diff"] == pytest.approx(scores[0] - scores[1], abs=1e-9)


def test_the_report_of_an_imported_run_says_what_is_unknown(two_runs: list[Path]) -> None:
    card = CliRunner().invoke(app, ["report", str(two_runs[0]), "--card"]).output
    assert "| enforcement | unknown" in card
    assert re.search(r"\| imported \| unknown \| unknown \|", card)
    (row,) = [line for line in card.splitlines() if " / imported |" in line]
    assert row.startswith(f"| {PAIR[0]} / imported | unknown |")
    assert "| none |" not in card and "none (host userland)" not in card


def test_no_secret_of_the_files_reaches_the_store(
    imported: tuple[Path, str], raw: dict[str, list[dict[str, Any]]]
) -> None:
    secrets = {
        value
        for ts in raw.values()
        for t in ts
        for value in re.findall(
            r"API_KEY=([A-Za-z0-9_-]{16,})",
            (t.get("exception_info") or {}).get("exception_message") or "",
        )
    }
    assert secrets
    stored = (imported[0] / "run.db").read_bytes()
    assert not any(secret.encode() in stored for secret in secrets)


def test_a_folder_given_twice_or_inside_another_is_refused_in_words(
    tb2_leaderboard: Path, tmp_path: Path
) -> None:
    """Not a SQLite UNIQUE error after reading everything: refused before any file is read."""
    one = tb2_leaderboard / PAIR[0]
    for paths, words in (
        ([one, one], "is given twice"),
        ([one, Path(f"{tb2_leaderboard}/../{tb2_leaderboard.name}/{PAIR[0]}")], "is given twice"),
        ([tb2_leaderboard, one], f"lies inside {tb2_leaderboard}"),
    ):
        run = tmp_path / "run"
        argv = [sys.executable, "-m", "levelfield", "import", "harbor", *map(str, paths)]
        done = subprocess.run([*argv, "--out", str(run)], capture_output=True, text=True)
        assert done.returncode == 2, done.stderr
        assert words in " ".join(done.stderr.split()) and "UNIQUE" not in done.stderr
        assert not run.exists()
