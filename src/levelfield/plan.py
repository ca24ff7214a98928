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

    @property
    def limits(self) -> Limits:
        return apply_policy(self.policy, self.task.spec)


def trial_key(task: str, agent: str, policy: str, repeat: int, window: str) -> str:
    identity = "\x1f".join([task, agent, policy, str(repeat), window])
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def plan_trials(
    tasks: Sequence[Task],
    agents: Sequence[str],
    policies: Sequence[Policy],
    *,
    repeats: int = 1,
    window: str = "default",
    seed: int = 0,
) -> list[Trial]:
    """Every policy is applied to every task first, so a bad policy fails before any trial."""
    for policy in policies:
        for task in tasks:
            apply_policy(policy, task.spec)
    trials = [
        Trial(trial_key(t.name, a, p.name, r, window), t, a, p, r, window)
        for t in tasks
        for a in agents
        for p in policies
        for r in range(1, repeats + 1)
    ]
    trials.sort(key=lambda tr: tr.key)  # independent of the order options were given in
    random.Random(seed).shuffle(trials)
    return trials


def estimate_duration_s(
    trials: Sequence[Trial], concurrency: int, measured_s: dict[str, float] | None = None
) -> float:
    """Wall time if trials take what earlier trials of their task took (else half the timeouts)."""
    measured_s = measured_s or {}
    total = sum(
        measured_s.get(t.task.name, (t.task.agent_timeout_s + t.task.verifier_timeout_s) / 2)
        for t in trials
    )
    return total / max(1, concurrency)
