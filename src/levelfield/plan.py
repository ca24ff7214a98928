"""tasks × agents × policies × repeats × windows → trials, in a seeded interleaved order.

Every configuration's trials are shuffled together (not run policy after policy), so time of day
and host load fall evenly on each configuration. The key of a trial is a hash of what defines it,
so the same command computes the same keys and a resumed run skips exactly what is stored.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from levelfield.policy import Limits, Policy, apply_policy
from levelfield.tasks import Task


@dataclass(frozen=True, slots=True)
class Trial:
    key: str
    task: Task
    agent: str
    policy: Policy
    repeat: int
    window: str = "default"
    concurrency: int | None = None  # set when trials in flight are a factor of the design
    limits_disclosed: bool = False  # the agent is told its floor and ceiling (disclosure.py)

    @property
    def limits(self) -> Limits:
        return apply_policy(self.policy, self.task.spec)


def trial_key(
    task: str,
    agent: str,
    policy: str,
    repeat: int,
    window: str,
    concurrency: int | None = None,
    limits_disclosed: bool = False,
) -> str:
    parts = [task, agent, policy, str(repeat), window]
    if concurrency is not None:
        parts.append(f"c{concurrency}")
    if limits_disclosed:  # appended only when on: keys of runs before the factor stay the same
        parts.append("limits-disclosed")
    identity = "\x1f".join(parts)
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def plan_trials(
    tasks: Sequence[Task],
    agents: Sequence[str],
    policies: Sequence[Policy],
    *,
    repeats: int = 1,
    window: str = "default",
    seed: int = 0,
    concurrency_levels: Sequence[int] | None = None,
    disclosure_levels: Sequence[bool] = (False,),
) -> list[Trial]:
    """Every policy is applied to every task first, so a bad policy fails before any trial.
    `disclosure_levels` (False, True) makes telling the agent its limits a paired factor."""
    for policy in policies:
        for task in tasks:
            apply_policy(policy, task.spec)
    levels: Sequence[int | None] = concurrency_levels or [None]
    trials = [
        Trial(trial_key(t.name, a, p.name, r, window, c, d), t, a, p, r, window, c, d)
        for t in tasks
        for a in agents
        for p in policies
        for r in range(1, repeats + 1)
        for c in levels
        for d in dict.fromkeys(disclosure_levels)
    ]
    trials.sort(key=lambda tr: tr.key)  # independent of the order options were given in
    random.Random(seed).shuffle(trials)
    return trials


BLOCK_ROUNDS = 4  # a block at concurrency c runs 4c trials: long enough to reach c in flight


def concurrency_blocks(trials: Sequence[Trial], default: int) -> list[tuple[int, list[Trial]]]:
    """When trials in flight are a factor, run alternating blocks, one level at a time, so every
    level meets the same hours and loads; otherwise one block at the run's concurrency."""
    queues: dict[int, list[Trial]] = {}
    for trial in trials:
        queues.setdefault(trial.concurrency or default, []).append(trial)
    blocks: list[tuple[int, list[Trial]]] = []
    while any(queues.values()):
        for level in sorted(queues):
            take = queues[level][: BLOCK_ROUNDS * level]
            queues[level] = queues[level][len(take) :]
            if take:
                blocks.append((level, take))
    return blocks


def estimate_duration_s(
    trials: Sequence[Trial], concurrency: int, measured_s: dict[str, float] | None = None
) -> float:
    """Wall time if trials take what earlier trials of their task took; a task never measured
    counts its full timeouts, so without measurements this is an upper bound."""
    measured_s = measured_s or {}
    total = sum(
        measured_s.get(t.task.name, t.task.agent_timeout_s + t.task.verifier_timeout_s)
        for t in trials
    )
    return total / max(1, concurrency)
