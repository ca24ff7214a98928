"""Trial table of a leaderboard → its tasks: how sure #1 is, and which tasks the board turns on.

**#1 against #2.** The paired difference of the two best entries, its Holm-adjusted p (the
leaderboard's family of comparisons: each entry with the next and with #1), and `gap_needed`:
the gap that, at this pair's measured task-clustered SE, would be proven whatever the other
p-values of the family, z(1 − α/2m)·SE for a family of m. Holm never multiplies a p-value by
more than m, so an observed gap of that size has a Holm-adjusted (normal) p below α; a smaller
one may be proven too, when other pairs are.

**Per task.** Each task's solve rate per entry (its passes over its trials, the score's own
per-task figure), the mean over the entries that ran it, and how many solved it at least once.
The tasks nobody solves say where the benchmark is beyond every entry; those every entry solves
say nothing about the ranks. **The tasks that decide a gap** are those on which the two entries'
rates differ, largest difference first: the gap is the mean of those differences over the tasks
both ran, so a gap that rests on a handful of tasks shows it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from levelfield.analysis.paired import TaskMatrix

TOP_GAPS = 4  # the adjacent gaps of the top five entries
DECIDING = 5  # tasks shown per gap


@dataclass(frozen=True, slots=True)
class First:
    """#1 (`label`) against #2 (`second`): the paired gap, its Holm-adjusted p, and the gap that
    would be proven at this pair's SE (see the module docstring)."""

    label: str
    second: str
    diff: float
    ci: tuple[float, float]
    p_vs_second: float
    proven: bool
    gap_needed: float
    family: int


@dataclass(frozen=True, slots=True)
class TaskRates:
    """One task across the board: `solve_rate` per entry that ran it; `kind` is "nobody" (no
    entry passed it once), "everybody" (every entry that ran it passed it at least once) or "";
    `decides` names the top gaps ("#1 vs #2", by place) among whose deciding tasks it is."""

    task: str
    solve_rate: dict[str, float]
    mean_rate: float
    ran_by: int
    solved_by: int
    kind: str
    decides: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DecidingTask:
    task: str
    rate_a: float
    rate_b: float
    diff: float


@dataclass(frozen=True, slots=True)
class Deciding:
    """The tasks on which an adjacent gap of the top entries rests: `n_differ` of the `n_tasks`
    both ran differ; `tasks` are the largest differences, a − b."""

    name: str  # by place on the board: "#1 vs #2"
    a: str
    b: str
    diff: float
    n_tasks: int
    n_differ: int
    tasks: tuple[DecidingTask, ...]


def first_against_second(
    label: str, second: str, diff: float, se: float, ci: tuple[float, float],
    p_holm: float, family: int, alpha: float,
) -> First:  # fmt: skip
    z = float(norm.ppf(1 - alpha / (2 * max(1, family))))
    return First(label, second, diff, ci, p_holm, bool(p_holm < alpha), z * se, family)


def deciding(scores: TaskMatrix, ordered: list[str]) -> tuple[Deciding, ...]:
    """The adjacent gaps among the top TOP_GAPS + 1 entries, each with its deciding tasks."""
    index = {label: j for j, label in enumerate(scores.labels)}
    top = ordered[: TOP_GAPS + 1]
    return tuple(
        _deciding(scores, index[a], index[b], f"#{place} vs #{place + 1}")
        for place, (a, b) in enumerate(itertools.pairwise(top), start=1)
    )


def _deciding(scores: TaskMatrix, i: int, j: int, name: str) -> Deciding:
    common = (scores.trials[i] > 0) & (scores.trials[j] > 0)
    a, b = scores.values[i][common], scores.values[j][common]
    tasks = [t for t, keep in zip(scores.tasks, common, strict=True) if keep]
    d = a - b
    order = sorted(np.flatnonzero(d != 0).tolist(), key=lambda k: (-abs(d[k]), tasks[k]))
    shown = tuple(
        DecidingTask(tasks[k], float(a[k]), float(b[k]), float(d[k])) for k in order[:DECIDING]
    )
    return Deciding(
        name,
        scores.labels[i],
        scores.labels[j],
        float(d.mean()) if d.size else float("nan"),
        int(d.size),
        len(order),
        shown,
    )


def task_rates(scores: TaskMatrix, gaps: tuple[Deciding, ...]) -> tuple[TaskRates, ...]:
    """Every task of the board, hardest first (lowest mean rate), then by name."""
    decides: dict[str, list[str]] = {}
    for gap in gaps:
        for row in gap.tasks:
            decides.setdefault(row.task, []).append(gap.name)
    out = []
    for t, task in enumerate(scores.tasks):
        ran = scores.trials[:, t] > 0
        rates = {scores.labels[j]: float(scores.values[j, t]) for j in np.flatnonzero(ran).tolist()}
        solved = sum(1 for rate in rates.values() if rate > 0)
        kind = "nobody" if solved == 0 else "everybody" if solved == len(rates) else ""
        out.append(
            TaskRates(
                task,
                rates,
                float(np.mean(list(rates.values()))) if rates else float("nan"),
                len(rates),
                solved,
                kind,
                tuple(decides.get(task, ())),
            )
        )
    return tuple(sorted(out, key=lambda r: (r.mean_rate, r.task)))
