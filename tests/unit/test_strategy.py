"""Which OOM kills the decomposition reads as the agent's chosen path, and what that does to the
split: worked examples computed by hand from `score = (1 − e)·c`."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from levelfield.analysis import summarize
from levelfield.analysis.strategy import strategy_kills

SPEC = 100 << 20
CEILING = {"strict": 1.0, "headroom": 3.0, "uncapped": math.inf}
ORDER = ["strict", "headroom", "uncapped"]


def _trial(task: str, policy: str, repeat: int, status: str, peak: float, path: str = "") -> dict:
    reason = {"passed": "tests_passed", "failed": "tests_failed", "infra_error": "oom_killed"}
    return {
        "task": task,
        "agent": "population",
        "policy": policy,
        "repeat": repeat,
        "status": status,
        "reason": reason[status],
        "peak_memory_bytes": peak * SPEC,
        "memory_spec_bytes": SPEC,
        "memory_ceiling_multiple": CEILING[policy],
        "trajectory": path or None,
    }


def _ladder(task: str, repeat: int, path: str, outcomes: tuple[str, str, str], peak: float) -> list:
    """One drawn path under the three policies; a killed trial peaks at its ceiling."""
    rows = []
    for policy, status in zip(ORDER, outcomes, strict=True):
        seen = min(peak, CEILING[policy]) if status == "infra_error" else peak
        rows.append(_trial(task, policy, repeat, status, seen, path))
    return rows


KILL, FAIL, PASS = "infra_error", "failed", "passed"


def _table() -> pd.DataFrame:
    rows = [
        # heavy and right: killed at 1x and 3x, passes uncapped at 5x: the agent's path
        *_ladder("heavy", 1, "heavy", (KILL, KILL, PASS), 5.0),
        *_ladder("heavy", 2, "lean", (PASS, PASS, PASS), 0.5),
        # a spike: killed at 1x once, fits elsewhere: noise (first step, never strategy)
        *_ladder("spike", 1, "lean", (KILL, PASS, PASS), 1.1),
        *_ladder("spike", 2, "lean", (PASS, PASS, PASS), 0.9),
        # killed at 1x and 3x, but uncapped it peaks at 2.5x, under 3x: 3x killed it by chance
        *_ladder("unlucky", 1, "odd", (KILL, KILL, PASS), 2.5),
        *_ladder("unlucky", 2, "odd", (KILL, KILL, PASS), 2.5),
        # the same path survived 3x once: not killed on every trial, so noise
        *_ladder("mixed", 1, "big", (KILL, KILL, PASS), 4.0),
        *_ladder("mixed", 2, "big", (KILL, FAIL, PASS), 4.0),
    ]
    return pd.DataFrame(rows)


def test_only_a_path_killed_at_every_ceiling_up_to_before_and_needing_more_is_strategy() -> None:
    found = strategy_kills(_table(), ORDER)
    assert found[["task", "before", "after", "n_strategy"]].values.tolist() == [
        ["heavy", "headroom", "uncapped", 1]
    ]


def test_without_path_labels_the_task_is_the_cell() -> None:
    table = _table().drop(columns="trajectory")
    # "heavy" mixes a killed and a passing trial at 3x once the paths are unnamed: noise
    assert strategy_kills(table, ORDER).empty


def test_without_evidence_columns_nothing_is_read_as_strategy() -> None:
    assert strategy_kills(_table().drop(columns="peak_memory_bytes"), ORDER).empty


def test_the_step_books_the_strategy_kills_as_capability_unlock() -> None:
    rows = [r for r in _table().to_dict("records") if r["task"] == "heavy"]
    summary = summarize(pd.DataFrame(rows), n_resamples=200)
    first, second = summary.decompositions
    # strict → headroom: nothing changes (the heavy path is killed at both): all zero
    assert (first.delta_score, first.noise_removal, first.strategy_kills) == (0.0, 0.0, 0)
    # headroom → uncapped, by hand. Without the re-reading: before e = 0.5, c = 1.0 (score 0.5);
    # after e = 0, c = 1 (score 1): noise = 0.5 · (1 + 1)/2 = 0.5, unlock = 0.
    # With the kill read as the agent's failure: before e = 0, c = 0.5; after e = 0, c = 1:
    # noise = 0, unlock = 0.5 · (1 + 1)/2 = 0.5.
    assert second.strategy_kills == 1 and second.strategy_tasks == ("heavy",)
    assert second.delta_score == pytest.approx(0.5)
    assert second.noise_removal == pytest.approx(0.0)
    assert second.capability_unlock == pytest.approx(0.5)
    # the scores table still counts the kill as an infra error
    headroom = next(c for c in summary.configs if c.labels["policy"] == "headroom")
    assert headroom.infra_error_rate.estimate.mean == pytest.approx(0.5)
