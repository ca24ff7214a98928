"""One Harbor trial folder → the facts levelfield keeps of it (`read_trial`).

Harbor writes `<job>/<trial>/result.json` (its `TrialResult`): task_name, trial_name, id,
agent_info (name, version, model_info), config (environment.type is the sandbox provider,
timeout_multiplier, the agent's and verifier's timeout overrides, resource overrides),
verifier_result.rewards (null when nothing was graded), exception_info (type, message,
traceback) and the start and end of each phase. A job's own summary is a `result.json` too, one
level up, without task_name or trial_name and with its `stats`: it is not a trial, and is
counted as a job summary. Any other result.json that is not a trial's is skipped with its reason.
Everything read from a trial folder is read here, so that what else a folder holds (files beside
result.json) has one place to be added.

**Rewards are checked, never coerced.** Harbor's `verifier_result.rewards` holds the grader's
reward: a number in [0, 1] under `reward` (or, without that key, numbers whose mean is taken, as
Harbor's reward.json allows). A value that is not such a number (2.0, -1, NaN, `true`, the string
"1.0") makes the trial's reward None and says what it was (`HarborTrial.reward_problem`): the
trial is never a pass, and the import books it as the grader's failure with those words.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from levelfield.harbor.result_fields import parse_json, parse_result
from levelfield.masking import mask_unknown_secrets

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
    """A result.json that is not a trial's (another tool's file, a trial result without its
    names); its message says why, and the import lists it as skipped."""


class JobSummary(NotATrial):
    """A job's own result.json: counted, not skipped."""


@dataclass(frozen=True, slots=True)
class HarborTrial:
    """A trial as its folder describes it. `task` is normalised (`normalise_task`);
    `facts` holds the fields of `records.HarborFacts` but `submission` and `job`, which the
    import adds once the folder's place is known, as it stores the trial."""

    task: str
    reward: float | None
    started_at: datetime | None
    finished_at: datetime | None
    facts: dict[str, Any]
    beside: Any = None  # beside.Beside: what the folder holds beside result.json
    reward_problem: str | None = None  # why verifier_result.rewards is not a reward
    unreadable: str | None = None  # why result.json of a trial that ran cannot be read

    @property
    def exception_type(self) -> str | None:
        return self.facts["exception_type"]


def read_trial(trial_dir: str) -> HarborTrial:
    """Raises OSError or ValueError (json's included) for a file that cannot be read as JSON,
    JobSummary for a job's summary and NotATrial (saying why) for other JSON that is not a
    trial's result."""
    raw = _read_bytes(os.path.join(trial_dir, RESULT_NAME))
    fields = parse_result(raw)
    if fields is None:
        fields = fields_of(parse_json(raw))
    rewards = fields.get("rewards")
    reward, problem = checked_reward(rewards)
    return HarborTrial(
        task=normalise_task(fields["task_name"]),
        reward=reward,
        started_at=fields.get("started_at"),
        finished_at=fields.get("finished_at"),
        facts=_facts(fields, rewards if problem is None else None),
        reward_problem=problem,
    )


def _read_bytes(path: str) -> bytes:
    """A whole file through the descriptor: `open()` adds a stat, a terminal check and a seek
    per file, a third of an import's system time over a leaderboard's 24,000 files."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


# Harbor names a trial's folder `<task name, at most 32 characters>__<short id>`.
_TRIAL_FOLDER = re.compile(r"^(?P<task>.+)__(?P<id>[A-Za-z0-9]+)$")


def unreadable_trial(trial_dir: str, why: str) -> HarborTrial | None:
    """A trial folder (named as Harbor names one) whose result.json cannot be read: the trial
    ran, so it is kept as a trial without a reward, its task taken from the folder's name
    (the import puts the full name back where another trial's folder shares the prefix).
    None for any other folder: its file is skipped with the reason."""
    name = os.path.basename(trial_dir)
    match = _TRIAL_FOLDER.match(name)
    if match is None:
        return None
    try:
        finished = datetime.fromtimestamp(os.stat(os.path.join(trial_dir, RESULT_NAME)).st_mtime)
    except OSError:
        finished = None
    prefix = match["task"]
    facts = _facts({"trial_name": name, "task_name": prefix}, None)
    return HarborTrial(
        task=normalise_task(prefix),
        reward=None,
        started_at=None,
        finished_at=finished.astimezone() if finished else None,
        facts=facts,
        unreadable=why,
    )


def trial_prefix(trial_name: str) -> str | None:
    """The task part of a trial folder's name as Harbor writes it; None for another name."""
    match = _TRIAL_FOLDER.match(trial_name)
    return match["task"] if match else None


def fields_of(data: Any) -> dict[str, Any]:
    """What `parse_result` keeps (result_fields.TrialFields), read from a file parsed whole
    that did not fit it: each field made of its type where that can be done honestly (a name
    written as a number becomes its text, a number that is not a finite one none); a timestamp
    that is not ISO 8601 raises ValueError. Raises JobSummary or NotATrial for a file that is
    not a trial's."""
    if type(data) is not dict:
        raise NotATrial(f"not a Harbor trial result: a JSON {_json_type(data)}, not an object")
    task, name = data.get("task_name"), data.get("trial_name")
    if type(task) is not str or type(name) is not str:
        raise _not_a_trial(data)
    info, config = _obj(data.get("agent_info")), _obj(data.get("config"))
    exception = _obj(data.get("exception_info"))
    fields = {
        "task_name": task,
        "trial_name": name,
        "trial_id": _text(data.get("id")),
        "task_checksum": _text(data.get("task_checksum")),
        "dataset": _text(data.get("source")),
        "agent_name": _text(info.get("name")),
        "agent_version": _text(info.get("version")),
        "model_info_name": _text(_obj(info.get("model_info")).get("name")),
        "agent_model_name": _text(_obj(config.get("agent")).get("model_name")),
        "sandbox_provider": _text(_obj(config.get("environment")).get("type")),
        "timeout_multiplier": _number(config.get("timeout_multiplier")),
        "rewards": _obj(data.get("verifier_result")).get("rewards"),
        "exception_type": _text(exception.get("exception_type")),
        "exception_message": exception.get("exception_message"),
        "exception_at": _text(exception.get("occurred_at")),
        "started_at": _time(data.get("started_at")),
        "finished_at": _time(data.get("finished_at")),
    }
    for section, keys in _OVERRIDES:
        values = _obj(config.get(section))
        for key in keys:
            fields[f"{section}_{key}"] = _number(values.get(key))
    for phase in PHASES:
        span = _obj(data.get(phase))
        fields[f"{phase}_started_at"] = _time(span.get("started_at"))
        fields[f"{phase}_finished_at"] = _time(span.get("finished_at"))
    return fields


def _not_a_trial(data: dict[str, Any]) -> NotATrial:
    if "task_name" not in data and "trial_name" not in data and "stats" in data:
        return JobSummary("a job's summary")
    missing = [
        f"{key} is {_shown(data[key])}, not a string" if key in data else f"no {key}"
        for key in ("task_name", "trial_name")
        if type(data.get(key)) is not str
    ]
    return NotATrial(f"not a Harbor trial result: {' and '.join(missing)}")


def checked_reward(rewards: Any) -> tuple[float | None, str | None]:
    """`verifier_result.rewards` → (the reward, None), or (None, what is wrong with it). None
    (nothing graded) and an empty object are no reward, and nothing wrong with the file."""
    if rewards is None or rewards == {}:
        return None, None
    if type(rewards) is dict:
        named = "reward" in rewards
        items = [("reward", rewards["reward"])] if named else list(rewards.items())
        where = "verifier_result.rewards."
    else:
        items, where = [("", rewards)], "verifier_result.rewards"
    for key, value in items:
        problem = _reward_problem(value)
        if problem is not None:
            return None, f"{where}{key} is {_shown(value)}: {problem}, so not a pass"
    return sum(float(v) for _, v in items) / len(items), None


def _reward_problem(value: Any) -> str | None:
    """None for a finite number in [0, 1]; else what the value is instead, in plain words."""
    if type(value) is bool:
        return "a boolean, not a number"
    if type(value) is int or type(value) is float:
        if math.isnan(value):
            return "not a number (NaN)"
        if not 0.0 <= value <= 1.0:
            return "outside the reward's range [0, 1]"
        return None
    return f"a {_json_type(value)}, not a number"


def _json_type(value: Any) -> str:
    names = {str: "string", list: "list", dict: "object", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")


def _shown(value: Any) -> str:
    """A value as the file wrote it (JSON), shortened."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


@functools.lru_cache(maxsize=4096)
def normalise_task(name: str) -> str:
    """One spelling per task, so that submissions pair: the dataset prefix goes
    (`terminal-bench/bn-fit-modify` → `bn-fit-modify`), and dots and underscores become hyphens
    (`install-windows-3.11` and `install-windows-3-11` are one task, named both ways)."""
    base = name.rstrip("/").rpartition("/")[2] or name
    return _SEPARATORS.sub("-", base.lower())


def _facts(fields: dict[str, Any], rewards: Any) -> dict[str, Any]:
    """The fields of HarborFacts from a trial's kept fields, each already of its type
    (`parse_result` checked them, or `fields_of` made them so): nothing is validated again,
    tens of thousands of times (tests/integration/test_leaderboard_import.py loads every record
    back through the store)."""
    get = fields.get
    message = get("exception_message")
    return {
        "trial_name": fields["trial_name"],
        "trial_id": get("trial_id"),
        "task_name": fields["task_name"],
        "task_checksum": get("task_checksum"),
        "dataset": get("dataset"),
        "agent_name": get("agent_name"),
        "agent_version": get("agent_version"),
        "model": get("model_info_name") or get("agent_model_name"),
        "sandbox_provider": get("sandbox_provider"),
        "timeout_multiplier": get("timeout_multiplier"),
        "overrides": {
            name: value for field, name in _OVERRIDE_FIELDS if (value := get(field)) is not None
        },
        "phase_s": {
            phase: (done - begun).total_seconds()
            for phase, start, end in _PHASE_FIELDS
            if (begun := get(start))
            and (done := get(end))
            and (begun.tzinfo is None) == (done.tzinfo is None)
        },
        "rewards": _numbers(rewards) if type(rewards) is dict else None,
        "exception_type": get("exception_type"),
        "exception_message": mask_unknown_secrets(str(message)[:MESSAGE_CHARS])
        if message
        else None,
        "exception_at": get("exception_at"),
    }


_OVERRIDE_FIELDS = tuple((f"{s}_{k}", f"{s}.{k}") for s, keys in _OVERRIDES for k in keys)
_PHASE_FIELDS = tuple((p, f"{p}_started_at", f"{p}_finished_at") for p in PHASES)


def _obj(value: Any) -> dict[str, Any]:
    return value if type(value) is dict else {}


def _numbers(rewards: dict[str, Any]) -> dict[str, float]:
    """The entries that are finite numbers: what the stored facts can hold as JSON."""
    return {str(k): v for k, v in rewards.items() if _number(v) is not None}


def _number(value: Any) -> float | None:
    """A finite number as it is (a boolean is none); anything else None."""
    if (type(value) is int or type(value) is float) and math.isfinite(value):
        return value
    return None


def _text(value: Any) -> str | None:
    """A name or id as text: a submitter's file may hold a number where Harbor writes a string,
    and a flag that counts names must not fail on it."""
    return value if value is None or type(value) is str else json.dumps(value)


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """None when either end is missing, or when one is naive and the other not: Harbor writes
    naive local times or UTC with a Z, and a mix of the two has no honest difference."""
    if start is None or end is None or (start.tzinfo is None) != (end.tzinfo is None):
        return None
    return (end - start).total_seconds()


def _time(value: Any) -> datetime | None:
    """ISO 8601 text (Python >= 3.11 reads a trailing Z); anything else but text None."""
    if not value or not isinstance(value, str):
        return None
    return datetime.fromisoformat(value)
