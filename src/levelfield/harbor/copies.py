"""One submission's trials → whether its attempts are one run copied (`copied_attempts`).

Repeating each task K times measures how much an agent's outcome varies from run to run: the
leaderboard's ± is made of it, and its K counts as K runs. A folder whose jobs are copies of one
run has K = 1 in effect and a ± that measures nothing. Two signs, each unlikely by chance:

- **no task varies**: every task's attempts have the same outcome (pass or not), over at least
  MIN_TASKS tasks with two attempts or more. On the shared leaderboard the median submission with
  several attempts has 28 varying tasks of 89, and the fewest after the copied one has 8;
- **identical jobs**: two job folders whose per-task outcomes are the same on at least MIN_TASKS
  common tasks, where the submission's own pass rates make that improbable: the chance that two
  independent runs agree on every task, at each task's pass rate over all the submission's
  attempts (the copies included, which only raises it), times the number of job pairs compared,
  is below CHANCE.

An outcome is what the score counts: the reward is 1 or not. A flag names what was found and
changes no trial.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Sequence

from levelfield.harbor.trial_file import HarborTrial

MIN_TASKS = 20  # fewer tasks agree by chance too easily (a job of 10 easy tasks, say)
CHANCE = 1e-3


def task_outcomes(trials: Sequence[HarborTrial]) -> dict[str, list[bool]]:
    """Per task, whether each of its trials passed (in the trials' order)."""
    per_task: dict[str, list[bool]] = defaultdict(list)
    for trial in trials:
        per_task[trial.task].append(trial.reward is not None and trial.reward >= 1.0)
    return per_task


def varying_tasks(outcomes: dict[str, list[bool]]) -> tuple[int, int] | None:
    """(tasks whose attempts' outcomes differ, tasks with two attempts or more), from
    `task_outcomes`; None when fewer than MIN_TASKS tasks have two attempts."""
    several = [v for v in outcomes.values() if len(v) >= 2]
    if len(several) < MIN_TASKS:
        return None
    return sum(1 for v in several if len(set(v)) > 1), len(several)


def copied_attempts(
    trials: Sequence[HarborTrial],
    jobs: Sequence[str],
    outcomes: dict[str, list[bool]],
    usual_varying: float | None,
) -> str | None:
    """What shows the submission's attempts to be copies, in words; None when nothing does.
    `jobs` names each trial's job folder, `outcomes` are its `task_outcomes`; `usual_varying`
    is the median number of varying tasks of the board's submissions with several attempts
    (None: no board to compare with)."""
    n_jobs = len(set(jobs))
    varying = varying_tasks(outcomes)
    if varying is not None and varying[0] == 0:
        where = f"its {n_jobs} jobs agree on every task" if n_jobs > 1 else "every task agrees"
        board = (
            f" (the median submission with several attempts has {usual_varying:g} varying tasks)"
            if usual_varying is not None
            else ""
        )
        return (
            f"0 of {varying[1]} tasks vary across its attempts: {where}{board}. Its attempts "
            "look like one run copied: K = 1 in effect, and its ± of 0 measures no retry noise"
        )
    if n_jobs < 2:
        return None
    return _identical_jobs(trials, jobs, outcomes)


def _identical_jobs(
    trials: Sequence[HarborTrial], jobs: Sequence[str], outcomes: dict[str, list[bool]]
) -> str | None:
    by_job: dict[str, dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    for trial, job in zip(trials, jobs, strict=True):
        by_job[job][trial.task].append(trial.reward is not None and trial.reward >= 1.0)
    rate = {task: sum(v) / len(v) for task, v in outcomes.items()}
    pairs = list(itertools.combinations(sorted(by_job), 2))
    found = []
    for a, b in pairs:
        common = by_job[a].keys() & by_job[b].keys()
        if len(common) < MIN_TASKS:
            continue
        if all(sorted(by_job[a][t]) == sorted(by_job[b][t]) for t in common):
            chance = len(pairs) * math.prod(_agree(rate[t], len(by_job[a][t])) for t in common)
            if chance < CHANCE:
                found.append((a, b, len(common), chance))
    if not found:
        return None
    shown = "; ".join(
        f"{a} and {b} on all {n} common tasks (chance {chance:.0e} at its own pass rates)"
        for a, b, n, chance in found[:3]
    )
    more = f" and {len(found) - 3} more pairs" if len(found) > 3 else ""
    return (
        f"jobs with identical per-task outcomes: {shown}{more}. A job copied is one run "
        "counted twice: it adds no attempt, and narrows the ± without measuring anything"
    )


def _agree(p: float, k: int) -> float:
    """The chance that two runs of k attempts each, passing with probability p, pass the
    same number of times."""
    return sum((math.comb(k, i) * p**i * (1 - p) ** (k - i)) ** 2 for i in range(k + 1))
