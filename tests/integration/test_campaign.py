"""A campaign on a compressed clock (one real second = 20 virtual minutes): three windows four
virtual hours (12 s) apart, killed with SIGKILL while it sleeps between the first and the
second, then resumed by the same command. No window runs twice, none is lost, and the report
breaks the figures down by window."""

from __future__ import annotations

import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from levelfield.store import reading

from ..conftest import MakeTask
from ._helpers import leftovers

SCALE = "1200"  # virtual seconds per real second: --every 4h is 12 s
# The index probe of each window fails at once (nothing listens on port 9 of loopback), so no
# window waits for PyPI at its end: the first window ends long before the second is due.
ENV = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple/"}
WAIT_S = 120.0


def _command(dataset: Path, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "levelfield", "campaign", str(dataset), "--out", str(out),
        "--every", "4h", "--windows", "3", "--agents", "oracle", "--policies", "strict",
        "--repeats", "2", "--late-grace", "1000h", "--time-scale", SCALE,
    ]


def _slots(out: Path) -> dict[str, str]:
    path = out / "campaign.json"
    if not path.exists():
        return {}
    try:
        return dict(json.loads(path.read_text())["slots"])
    except (ValueError, KeyError):
        return {}


@pytest.mark.sandbox
@pytest.mark.slow
def test_campaign_killed_between_windows_resumes_the_schedule(
    make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("alpha")
    make_task("beta", solve="echo beta > /app/out && touch /app/done")
    dataset, out = tmp_path / "dataset", tmp_path / "run"
    log1 = (tmp_path / "first.log").open("w")
    first = subprocess.Popen(_command(dataset, out), stdout=log1, stderr=subprocess.STDOUT,
                             start_new_session=True, env=ENV)
    deadline = time.monotonic() + WAIT_S
    asleep = False  # the first window stored as done, the next one announced
    while time.monotonic() < deadline and not asleep:
        assert first.poll() is None, (tmp_path / "first.log").read_text()
        time.sleep(0.1)
        done = "done" in _slots(out).values()
        asleep = done and "next: window" in (tmp_path / "first.log").read_text()
    slots = _slots(out)
    assert list(slots.values()) == ["done"], slots
    assert asleep, (tmp_path / "first.log").read_text()
    os.killpg(first.pid, signal.SIGKILL)  # between windows: the first is done, it sleeps
    first.wait()
    assert list(_slots(out).values()) == ["done"]  # still asleep when killed
    log1.close()
    with reading(out) as store:
        run_id = store.meta()["run_id"]
        assert store.count() == 4  # 2 tasks × 2 repeats

    second = subprocess.run(_command(dataset, out), capture_output=True, text=True,
                            timeout=WAIT_S, env=ENV)
    assert second.returncode == 0, second.stderr
    assert "already run" in second.stderr and "campaign complete" in second.stderr

    slots = _slots(out)
    assert list(slots.values()) == ["done"] * 3
    labels = sorted(slots)
    hours = [datetime.strptime(label, "%Y-%m-%dT%H") for label in labels]
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(hours)] == [
        4 * 3600,
        4 * 3600,
    ]
    with sqlite3.connect(out / "run.db") as conn:
        plans = conn.execute("SELECT window FROM plans ORDER BY seq").fetchall()
        per_window = dict(conn.execute("SELECT window, COUNT(*) FROM trials GROUP BY window"))
        keys = conn.execute("SELECT COUNT(DISTINCT trial_key), COUNT(*) FROM trials").fetchone()
    assert [p[0] for p in plans] == labels  # each window planned once: none ran twice
    assert per_window == dict.fromkeys(labels, 4)
    assert keys == (12, 12)
    assert leftovers(run_id, out) == []

    report = subprocess.run(
        [sys.executable, "-m", "levelfield", "report", str(out), "--json"],
        capture_output=True, text=True, timeout=WAIT_S,
    )
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    assert [s["label"] for s in figures["time"]["by_window"]] == labels
    assert all(s["n_trials"] == 4 for s in figures["time"]["by_window"])
    (test,) = figures["time"]["window_tests"]
    assert test["windows"] == labels and test["n_tasks"] == 2
