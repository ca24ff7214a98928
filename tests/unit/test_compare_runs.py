"""`compare RUN_A RUN_B` of runs whose configurations differ only in which run they are (two
imported submissions, each its own agent): the runs are compared as wholes, paired by task."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

from levelfield.analysis.paired import compare


def trials(run: str, agent: str, passed: dict[str, int], k: int = 4) -> pd.DataFrame:
    rows = [
        {
            "run": run,
            "task": task,
            "agent": agent,
            "policy": "imported",
            "repeat": r,
            "status": "passed" if r <= n else "failed",
        }
        for task, n in passed.items()
        for r in range(1, k + 1)
    ]
    return pd.DataFrame(rows)


def test_two_runs_of_different_agents_compare_as_wholes() -> None:
    a = trials("A", "Droid", {"t1": 4, "t2": 2, "t3": 0, "t4": 3})
    b = trials("B", "Forge", {"t1": 3, "t2": 2, "t3": 1, "t4": 0})
    result = compare(pd.concat([a, b]), by="run", order=["A", "B"])
    (pair,) = result.pairs
    assert (pair.a, pair.b, pair.within) == (
        "A",
        "B",
        (("policy", "imported"), ("window", "default")),
    )
    per_task = [(4 - 3) / 4, 0.0, (0 - 1) / 4, 3 / 4]
    assert pair.estimate.diff == pytest.approx(sum(per_task) / 4)
    assert pair.estimate.n_tasks == 4


def test_runs_sharing_their_agents_still_pair_within_each_agent() -> None:
    frames = [
        trials(run, agent, {"t1": n, "t2": 4 - n, "t3": 1})
        for (run, n), agent in itertools.product((("A", 1), ("B", 3)), ("x", "y"))
    ]
    result = compare(pd.concat(frames), by="run", order=["A", "B"])
    assert sorted(dict(p.within)["agent"] for p in result.pairs) == ["x", "y"]
