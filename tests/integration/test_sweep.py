"""A small sweep end to end on the real sandbox: the report's structure, its figures against the
stored trials (recomputed here straight from SQLite), windows, and resume in the same order."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from ..conftest import MakeTask
from ._helpers import stored_count

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
SPIKE = 'python3 -c \'b = b"x" * (100 << 20); open("/app/done", "w").write("ok")\''


def _levelfield(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "levelfield", *args], capture_output=True, text=True, timeout=timeout
    )


def _sweep(dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        "sweep",
        str(dataset),
        "--out",
        str(out),
        "--agents",
        "oracle",
        "--policies",
        "strict,3x",
        "--repeats",
        "2",
        "--concurrency",
        "2",
        "--no-report",
        *extra,
    ]


def _scores_from_sqlite(db: Path) -> dict[tuple[str, str, str], float]:
    """Mean over tasks of each task's mean pass rate, per (agent, policy, window)."""
    per_task: dict[tuple[str, str, str], dict[str, list[int]]] = defaultdict(
        lambda: defaultdict(list)
    )
    with sqlite3.connect(db) as conn:
        for agent, policy, window, task, outcome in conn.execute(
            "SELECT agent, policy, window, task, outcome FROM trials"
        ):
            per_task[(agent, policy, window)][task].append(outcome == "passed")
    return {
        k: sum(sum(v) / len(v) for v in tasks.values()) / len(tasks)
        for k, tasks in per_task.items()
    }


def test_sweep_report_matches_the_stored_trials_across_windows(
    make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("control")
    root = make_task("spike", solve=SPIKE, memory_mb=64)
    out = tmp_path / "sweep"
    for window in ("morning", "evening"):
        done = _levelfield(*_sweep(root.parent, out, "--window", window))
        assert done.returncode == 0, done.stderr
        assert "plan" in done.stderr and "trials to run" in done.stderr
    report = _levelfield("report", str(out), "--json")
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    expected = _scores_from_sqlite(out / "run.db")
    got = {
        (c["labels"]["agent"], c["labels"]["policy"], c["labels"]["window"]): c["score"][
            "estimate"
        ]["mean"]
        for c in figures["configs"]
    }
    assert got.keys() == expected.keys() and len(got) == 4
    for key, value in expected.items():
        assert got[key] == pytest.approx(value)
        assert 0.0 <= value <= 1.0
    strict_infra = [
        c["infra_error_rate"]["estimate"]["mean"]
        for c in figures["configs"]
        if c["labels"]["policy"] == "strict"
    ]
    assert all(rate == pytest.approx(0.5) for rate in strict_infra)  # the spike, every time
    assert figures["sensitivity"][0]["task"] == "spike"
    assert figures["decompositions"] and figures["calibration"]
    html = tmp_path / "s.html"
    assert _levelfield("report", str(out), "--html", str(html)).returncode == 0
    assert html.read_text().count("<svg") >= 3


def test_an_interrupted_sweep_resumes_in_the_same_order_without_duplicates(
    make_task: MakeTask, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        root = make_task(name, solve="sleep 0.5; touch /app/done")
    out = tmp_path / "sweep"
    args = [*_sweep(root.parent, out), "--concurrency", "1", "--seed", "11"]
    first = subprocess.Popen(
        [sys.executable, "-m", "levelfield", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while stored_count(out) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    assert _levelfield(*args).returncode == 0
    with sqlite3.connect(out / "run.db") as conn:
        plans = [
            json.loads(k) for (k,) in conn.execute("SELECT trial_keys FROM plans ORDER BY seq")
        ]
        ran = [k for (k,) in conn.execute("SELECT trial_key FROM trials ORDER BY started_at")]
    assert len(plans) == 2 and plans[0] == plans[1]  # the same seeded order both times
    assert ran == plans[0] and len(set(ran)) == 12  # in that order, each trial once
