"""levelfield: agentic-benchmark scores you can trust.

Runs Harbor-format tasks under an explicit resource floor and ceiling, classifies every failure
as the agent's or the infrastructure's with kernel evidence, and reports scores with their noise.

The public names are imported when first used (PEP 562): `levelfield import harbor` or
`levelfield report` need the store and the analysis, not the executor and every backend.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from levelfield.config import RunConfig
    from levelfield.errors import LevelfieldError
    from levelfield.executor import run
    from levelfield.outcome import classify
    from levelfield.plan import Trial, plan_trials
    from levelfield.policy import PRESETS, Limits, Policy, apply_policy, resolve_policy
    from levelfield.records import Outcome, Reason, TrialRecord
    from levelfield.runner import run_trial
    from levelfield.tasks import Task, load_dataset, load_task

_HOMES = {
    "RunConfig": "config",
    "LevelfieldError": "errors",
    "run": "executor",
    "classify": "outcome",
    "Trial": "plan",
    "plan_trials": "plan",
    "PRESETS": "policy",
    "Limits": "policy",
    "Policy": "policy",
    "apply_policy": "policy",
    "resolve_policy": "policy",
    "Outcome": "records",
    "Reason": "records",
    "TrialRecord": "records",
    "run_trial": "runner",
    "Task": "tasks",
    "load_dataset": "tasks",
    "load_task": "tasks",
}
__all__ = [
    "PRESETS",
    "LevelfieldError",
    "Limits",
    "Outcome",
    "Policy",
    "Reason",
    "RunConfig",
    "Task",
    "Trial",
    "TrialRecord",
    "apply_policy",
    "classify",
    "load_dataset",
    "load_task",
    "plan_trials",
    "resolve_policy",
    "run",
    "run_trial",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'levelfield' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"levelfield.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
