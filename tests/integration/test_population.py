"""The population agent in real sandboxes: the draw depends on (task, repeat, window) only, so
every policy meets the same behaviour, while the kernel alone decides what each policy does to it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from levelfield.records import Outcome, Reason

from ..conftest import MakeTask
from ._helpers import run_records

pytestmark = pytest.mark.sandbox

# Three recorded behaviours; each leaves its name in /app/path.txt, so the test can check which
# trajectory really ran, not only what the record says was drawn.
LEAN = "echo lean > /app/path.txt && touch /app/done"
WRONG = "echo wrong > /app/path.txt"
HUNGRY = (  # ~3x the 40 MiB spec before answering: killed at 1x, fits uncapped
    "echo hungry > /app/path.txt && python3 -c 'b = b\"x\" * (120 << 20)' && touch /app/done"
)
POPULATION = """\
description = "test mixture"
[probabilities]
lean = 0.4
wrong = 0.3
hungry = 0.3
"""


def _trajectory(command: str) -> str:
    return json.dumps({"schema_version": 1, "steps": [{"command": command}]})


def test_the_draw_is_identical_across_policies_and_only_the_kernel_differs(
    make_task: MakeTask, tmp_path: Path
) -> None:
    files = {
        "trajectories/lean.json": _trajectory(LEAN),
        "trajectories/wrong.json": _trajectory(WRONG),
        "trajectories/hungry.json": _trajectory(HUNGRY),
        "trajectories/population.toml": POPULATION,
    }
    for name in ("alpha", "beta"):
        make_task(name, memory_mb=40, files=files)
    dataset, out = tmp_path / "dataset", tmp_path / "run"
    options = {"agents": ["population"], "policies": ["strict", "3x", "uncapped"], "repeats": 4}
    run_records(dataset, out, concurrency=2, **options)
    records = run_records(dataset, out, concurrency=2, window="later", **options)
    assert len(records) == 2 * 3 * 4 * 2

    drawn: dict[tuple[str, int, str], set[str | None]] = defaultdict(set)
    for r in records:
        drawn[(r.task, r.repeat, r.window)].add(r.trajectory)
        ran = (out / "trials" / r.trial_key / "trajectory.json").read_text()
        assert json.loads(ran)["drawn"] == r.trajectory
        assert f"echo {r.trajectory} > /app/path.txt" in ran
    assert all(len(names) == 1 for names in drawn.values()), drawn
    assert {n for names in drawn.values() for n in names} == {"lean", "wrong", "hungry"}

    by_path = defaultdict(set)
    for r in records:
        by_path[(r.trajectory, r.policy)].add((r.outcome, r.reason))
    assert by_path[("hungry", "strict")] == {(Outcome.INFRA_ERROR, Reason.OOM_KILLED)}
    assert by_path[("hungry", "uncapped")] == {(Outcome.PASSED, Reason.TESTS_PASSED)}
    for policy in ("strict", "headroom", "uncapped"):
        assert by_path[("lean", policy)] == {(Outcome.PASSED, Reason.TESTS_PASSED)}
        assert by_path[("wrong", policy)] == {(Outcome.FAILED, Reason.TESTS_FAILED)}
