"""Bad input at scale: a 10,000-task dataset, nearly all of it bad in one way each. `tasks check`
names every bad task's own problem; `run` skips each one with its reason recorded in the run,
runs the good ones, and neither crashes nor loses a task."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from .._bad_tasks import EXPECTED, KINDS, write_task

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

N_TASKS = 10_000
GOOD_EVERY = 1_000  # 10 good tasks: real trials, cheap enough for CI


def _kind_of(i: int) -> str:
    return "good" if i % GOOD_EVERY == 0 else KINDS[1 + i % (len(KINDS) - 1)]


def _levelfield(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "levelfield", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def test_ten_thousand_tasks_every_bad_one_named_skipped_and_recorded(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    kinds = {}
    for i in range(N_TASKS):
        name = f"t{i:05d}"
        kinds[name] = _kind_of(i)
        junk = bytes([i % 256, 0xFF])
        write_task(dataset / name, kinds[name], variant=i // len(KINDS), junk=junk)
    good = {n for n, k in kinds.items() if k == "good"}

    checked = _levelfield("tasks", "check", str(dataset))
    assert checked.returncode == 1, checked.stderr[-2000:]
    assert f"{N_TASKS} tasks, {N_TASKS - len(good)} with problems" in checked.stdout

    out = tmp_path / "run"
    ran = _levelfield("run", str(dataset), "--out", str(out), "--backend", "process",
                      "--policy", "uncapped", "--concurrency", "2")  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    with sqlite3.connect(out / "run.db") as conn:
        records = conn.execute("SELECT task, outcome FROM trials").fetchall()
        query = "SELECT value FROM meta WHERE key = 'skipped_tasks'"
        (skipped_json,) = conn.execute(query).fetchone()
    skipped = {entry["task"]: entry["problem"] for entry in json.loads(skipped_json)}

    assert sorted(task for task, _ in records) == sorted(good)  # each good task ran once
    assert {outcome for _, outcome in records} == {"passed"}
    assert set(skipped) == set(kinds) - good  # every bad task skipped, none lost
    for name, problem in skipped.items():
        assert name in problem and EXPECTED[kinds[name]] in problem, (kinds[name], problem)
    print(f"\n{N_TASKS} tasks: {len(records)} run, {len(skipped)} skipped with their reason;",
          dict(Counter(kinds[n] for n in skipped)))  # fmt: skip
