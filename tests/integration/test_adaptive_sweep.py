"""An adaptive sweep of the bundled suite, end to end: the `terminal` agent asks a scripted model
on loopback (which answers each task with one of its recorded strategies, at random), the trials
run in real sandboxes, the sweep stops on --target-ci before --max-trials, and its report shows the
repeats each task got and what the tokens cost."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from levelfield.records import TrialRecord

from ..conftest import EXAMPLES, MakeTask
from ._helpers import leftovers, stored_count
from ._model_server import Script, model_server

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]
SUITE = EXAMPLES / "noise-suite"
TWO_WAY = {"top-words", "fit-line", "score-workers"}  # lean or hungry, the model's choice
PRICE_IN, PRICE_OUT = 3.0, 15.0  # $ per million tokens


def _responder(seed: int):  # type: ignore[no-untyped-def]
    """First turn: the commands of one of the task's recorded strategies; then: done."""
    by_instruction = {
        (task / "instruction.md").read_text(): task for task in SUITE.iterdir() if task.is_dir()
    }
    rng = random.Random(seed)

    def answer(messages: list[dict]) -> str:  # type: ignore[type-arg]
        users = [m["content"] for m in messages if m["role"] == "user"]
        if len(users) > 1:
            return json.dumps({"commands": [], "done": True})
        task = by_instruction[users[0]]
        way = "hungry" if task.name in TWO_WAY and rng.random() < 0.5 else "lean"
        steps = json.loads((task / "trajectories" / f"{way}.json").read_text())["steps"]
        return json.dumps({"commands": [s["command"] for s in steps], "done": False})

    return answer


def _levelfield(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "levelfield", *args], capture_output=True, text=True, timeout=900
    )


def _records(out: Path) -> list[TrialRecord]:
    with sqlite3.connect(f"file:{out / 'run.db'}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT record FROM trials").fetchall()
    return [TrialRecord.model_validate_json(raw) for (raw,) in rows]


def test_adaptive_sweep_of_the_bundled_suite_stops_on_its_target(tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[models."scripted-model"]\ninput = {PRICE_IN}\noutput = {PRICE_OUT}\n')
    out = tmp_path / "adaptive"
    with model_server(Script(responder=_responder(seed=7))) as url:
        args = [
            "sweep", str(SUITE), "--agents", "terminal", "--model", "scripted-model",
            "--base-url", url, "--policies", "3x,uncapped", "--target", "diff:uncapped-3x",
            "--target-ci", "14pp", "--max-trials", "300", "--concurrency", "2",
            "--prices", str(prices),
            "--out", str(out),
        ]  # fmt: skip
        first = _levelfield(*args)
        print(first.stderr[-3000:], first.stdout[-6000:])
        assert first.returncode == 0, first.stderr
        records = _records(out)
        again = _levelfield(*args)  # resumes: nothing left to run, the same answer
    assert again.returncode == 0, again.stderr
    assert len(_records(out)) == len(records)
    assert "adaptive sweep stopped: target reached" in first.stderr
    assert len(records) < 300
    repeats: dict[tuple[str, str], list[str]] = {}
    for r in records:
        repeats.setdefault((r.task, r.policy), []).append(r.outcome.value)
    k = {cell: len(v) for cell, v in repeats.items()}
    assert min(k.values()) >= 2  # the pilot
    # A round (if the pilot did not already reach the target) gives its repeats to the tasks
    # whose outcome varies (the two-way ones by the model's choice, and any other that a busy
    # host pushed past its timeout at 3x) before any whose every trial agreed.
    outcomes: dict[str, set[str]] = {}
    for (task, _), values in repeats.items():
        outcomes.setdefault(task, set()).update(values)
    varied = {task for task, seen in outcomes.items() if len(seen) > 1}
    if max(k.values()) > 2:
        assert max(k, key=lambda cell: k[cell])[0] in varied
    assert "repeats K per task" in first.stdout and "whole sweep" in first.stdout
    assert "per point of half-width" in first.stdout
    for r in records:
        assert r.tokens_in and r.tokens_out
        expected = (r.tokens_in * PRICE_IN + r.tokens_out * PRICE_OUT) / 1e6
        assert r.cost_usd == pytest.approx(expected)
        assert r.tokens_in == sum(c.tokens_in or 0 for c in r.api_calls)


def _rounds(out: Path) -> list[list[list[object]]]:
    try:
        with sqlite3.connect(f"file:{out / 'run.db'}?mode=ro", uri=True) as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'adaptive'").fetchone()
    except sqlite3.Error:
        return []
    rounds = json.loads(row[0]).get("rounds", {}).get("default", []) if row else []
    return [r["cells"] for r in rounds]


def test_a_killed_adaptive_sweep_resumes_the_same_allocation(
    make_task: MakeTask, tmp_path: Path
) -> None:
    for name in ("sure-a", "sure-b", "sure-c"):
        root = make_task(name, solve="sleep 0.2; touch /app/done")
    for name in ("coin-a", "coin-b", "coin-c"):
        make_task(name, solve="sleep 0.2; if (( RANDOM % 2 )); then touch /app/done; fi")
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "levelfield", "sweep", str(root.parent), "--agents", "oracle",
        "--policies", "strict", "--target-ci", "1pp", "--max-trials", "60", "--pilot-repeats", "3",
        "--no-report", "--out", str(out),
    ]  # fmt: skip
    log = tmp_path / "killed.log"
    with log.open("wb") as sink:  # a harness that stalls dumps its threads' stacks on SIGABRT
        harness = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONFAULTHANDLER": "1"})  # fmt: skip
    deadline = time.monotonic() + 240
    while len(_rounds(out)) < 2 and harness.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    stalled = harness.poll() is None and len(_rounds(out)) < 2
    ps = ["ps", "-eo", "pid,ppid,stat,etime,args", "--forest"]
    processes = subprocess.run(ps, capture_output=True, text=True).stdout if stalled else ""
    os.kill(harness.pid, signal.SIGABRT if stalled else signal.SIGKILL)
    harness.wait()
    before = _rounds(out)
    interrupted = stored_count(out)
    assert len(before) >= 2 and 18 < interrupted < 60, (
        f"killed too early or too late: {len(before)} round(s), {interrupted} trial(s) stored, "
        f"exit {harness.returncode}; its output: {log.read_text(errors='replace')[-6000:]}\n"
        f"{processes[-6000:]}"
    )
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "adaptive sweep stopped: budget spent" in resumed.stderr
    after = _rounds(out)
    assert after[: len(before)] == before  # the stored rounds ran as planned, not re-planned
    records = _records(out)
    keys = [r.trial_key for r in records]
    assert len(keys) == len(set(keys)) == 60
    planned = {(c[2], r) for cells in after for c in cells for r in range(c[3], c[4] + 1)}
    assert planned <= {(r.task, r.repeat) for r in records}
    coins = sum(1 for r in records if r.task.startswith("coin"))
    assert coins >= 60 - coins  # the uncertain tasks got the repeats
    with sqlite3.connect(f"file:{out / 'run.db'}?mode=ro", uri=True) as conn:
        run_id = json.loads(conn.execute("SELECT value FROM meta WHERE key='run_id'").fetchone()[0])
    assert leftovers(run_id, out) == []
