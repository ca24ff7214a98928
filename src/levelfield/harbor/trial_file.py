"""One Harbor trial folder → the facts levelfield keeps of it (`read_trial`).

Harbor writes `<job>/<trial>/result.json` (its `TrialResult`): task_name, trial_name, id,
agent_info (name, version, model_info), config (environment.type is the sandbox provider,
timeout_multiplier, the agent's and verifier's timeout overrides, resource overrides),
verifier_result.rewards (null when nothing was graded), exception_info (type, message,
traceback) and the start and end of each phase. A job's own summary is a `result.json` too, one
level up, without task_name: it is not a trial. Everything read from a trial folder is read
here, so that what else a folder holds (files beside result.json) has one place to be added.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from levelfield.masking import mask_unknown_secrets
from levelfield.verifier import reward_of

RESULT_NAME = "result.json"
PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")
MESSAGE_CHARS = 2000  # a message, not a log: Docker compose errors quote whole command lines
# config keys whose value, when set, replaced what the task asked for
_OVERRIDES = (
    ("agent", ("override_timeout_sec", "max_timeout_sec", "override_setup_timeout_sec")),
    ("verifier", ("override_timeout_sec", "max_timeout_sec")),
    ("environment", ("override_cpus", "override_memory_mb", "override_storage_mb")),
)
_SEPARATORS = re.compile(r"[._\s]+")


class NotATrial(ValueError):
    """A result.json that is not a trial's (a job's summary, another tool's file)."""


@dataclass(frozen=True, slots=True)
class HarborTrial:
    """A trial as its folder describes it. `task` is normalised (`normalise_task`);
    `facts` holds the fields of `records.HarborFacts` but `submission` and `job` (known once the
    folder's place is), validated as HarborFacts when the trial is stored."""

    task: str
    reward: float | None
    started_at: datetime | None
    finished_at: datetime | None
    facts: dict[str, Any]
    beside: Any = None  # beside.Beside: what the folder holds beside result.json

    @property
    def exception_type(self) -> str | None:
        return self.facts["exception_type"]


def read_trial(trial_dir: str) -> HarborTrial:
    """Raises OSError or ValueError (json's included) for a file that cannot be read as JSON,
    and NotATrial for valid JSON that is not a trial's result."""
    path = os.path.join(trial_dir, RESULT_NAME)
    with open(path, "rb") as file:
        data = json.loads(file.read())
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), str) for k in ("task_name", "trial_name")
    ):
        raise NotATrial(f"{path}: not a Harbor trial result")
    rewards = (data.get("verifier_result") or {}).get("rewards")
    return HarborTrial(
        task=normalise_task(data["task_name"]),
        reward=reward_of(rewards) if rewards is not None else None,
        started_at=_time(data.get("started_at")),
        finished_at=_time(data.get("finished_at")),
        facts=_facts(data, rewards),
    )


def normalise_task(name: str) -> str:
    """One spelling per task, so that submissions pair: the dataset prefix goes
    (`terminal-bench/bn-fit-modify` → `bn-fit-modify`), and dots and underscores become hyphens
    (`install-windows-3.11` and `install-windows-3-11` are one task, named both ways)."""
    base = name.rstrip("/").rpartition("/")[2] or name
    return _SEPARATORS.sub("-", base.lower())


def _facts(data: dict[str, Any], rewards: Any) -> dict[str, Any]:
    info = data.get("agent_info") or {}
    config = data.get("config") or {}
    agent_config = config.get("agent") or {}
    exception = data.get("exception_info") or {}
    message = exception.get("exception_message")
    return {
        "trial_name": data["trial_name"],
        "trial_id": _text(data.get("id")),
        "task_name": data["task_name"],
        "task_checksum": _text(data.get("task_checksum")),
        "dataset": _text(data.get("source")),
        "agent_name": _text(info.get("name")),
        "agent_version": _text(info.get("version")),
        "model": _text(
            (info.get("model_info") or {}).get("name") or agent_config.get("model_name")
        ),
        "sandbox_provider": _text((config.get("environment") or {}).get("type")),
        "timeout_multiplier": config.get("timeout_multiplier"),
        "overrides": _overrides(config),
        "phase_s": _phase_seconds(data),
        "rewards": rewards if isinstance(rewards, dict) else None,
        "exception_type": _text(exception.get("exception_type")),
        "exception_message": mask_unknown_secrets(str(message)[:MESSAGE_CHARS])
        if message
        else None,
        "exception_at": _text(exception.get("occurred_at")),
    }


def _text(value: Any) -> str | None:
    """A name or id as text: a submitter's file may hold a number where Harbor writes a string,
    and a flag that counts names must not fail on it."""
    return value if value is None or type(value) is str else json.dumps(value)


def _overrides(config: dict[str, Any]) -> dict[str, float | None]:
    found: dict[str, float | None] = {}
    for section, keys in _OVERRIDES:
        values = config.get(section)
        if values:
            for key in keys:
                if (value := values.get(key)) is not None:
                    found[f"{section}.{key}"] = value
    return found


def _phase_seconds(data: dict[str, Any]) -> dict[str, float]:
    found = {}
    for phase in PHASES:
        span = data.get(phase)
        if span and isinstance(span, dict):
            seconds = seconds_between(_time(span.get("started_at")), _time(span.get("finished_at")))
            if seconds is not None:
                found[phase] = seconds
    return found


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """None when either end is missing, or when one is naive and the other not: Harbor writes
    naive local times or UTC with a Z, and a mix of the two has no honest difference."""
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return None
    return (end - start).total_seconds()


def _time(text: Any) -> datetime | None:
    if not text or not isinstance(text, str):
        return None
    return datetime.fromisoformat(text)  # Python >= 3.11 reads a trailing Z
