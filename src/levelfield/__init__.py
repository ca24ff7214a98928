"""levelfield: agentic-benchmark scores you can trust.

Runs Harbor-format tasks under an explicit resource floor and ceiling, classifies every failure
as the agent's or the infrastructure's with kernel evidence, and reports scores with their noise.
"""

from levelfield.config import RunConfig
from levelfield.errors import LevelfieldError
from levelfield.executor import run
from levelfield.outcome import classify
from levelfield.plan import Trial, plan_trials
from levelfield.policy import PRESETS, Limits, Policy, apply_policy, resolve_policy
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.runner import run_trial
from levelfield.tasks import Task, load_dataset, load_task

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
