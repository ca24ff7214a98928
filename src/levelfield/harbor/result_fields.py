"""Harbor's result.json → the fields the import keeps of a trial, flat (`parse_result`).

A trial's result.json holds far more than the import keeps (the agent's token counts, its whole
config, metadata): about 4.5 kB, of which a few hundred bytes are kept. pydantic parses the file
against `TrialFields`, checking all of it as JSON but building Python objects only for the fields
listed here, each fetched from its place in Harbor's TrialResult (`agent_info.model_info.name`
→ `model_info_name`) and checked for its type, timestamps read as datetimes: on the shared
leaderboard this costs about a third of `json.loads` (benchmarks/harbor_import.py).

A file that does not fit (a number where Harbor writes a string, a timestamp that is not ISO
8601, a NaN, a top level that is not an object, a job's summary) is parsed whole by `parse_json`
instead and read field by field by trial_file.py, which makes the same facts of what fits.
tests/unit/test_harbor_layout.py checks that both ways read the same facts from real files.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from pydantic import AliasPath, Field, Strict, TypeAdapter, ValidationError
from pydantic_core import from_json
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

Text = Annotated[str, Strict()] | None
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)] | None  # not a boolean either
Time = Annotated[datetime, Strict()] | None  # ISO 8601 text only, never a number


def _at(*path: str | int) -> Any:
    return Field(validation_alias=AliasPath(*path))


class TrialFields(TypedDict, total=False):
    """The kept fields of a trial's result.json, flat. A field whose path is missing, or leads
    through a null, is absent."""

    task_name: Text
    trial_name: Text
    trial_id: Annotated[Text, _at("id")]
    task_checksum: Text
    dataset: Annotated[Text, _at("source")]
    agent_name: Annotated[Text, _at("agent_info", "name")]
    agent_version: Annotated[Text, _at("agent_info", "version")]
    model_info_name: Annotated[Text, _at("agent_info", "model_info", "name")]
    agent_model_name: Annotated[Text, _at("config", "agent", "model_name")]
    sandbox_provider: Annotated[Text, _at("config", "environment", "type")]
    timeout_multiplier: Annotated[Number, _at("config", "timeout_multiplier")]
    agent_override_timeout_sec: Annotated[Number, _at("config", "agent", "override_timeout_sec")]
    agent_max_timeout_sec: Annotated[Number, _at("config", "agent", "max_timeout_sec")]
    agent_override_setup_timeout_sec: Annotated[
        Number, _at("config", "agent", "override_setup_timeout_sec")
    ]
    verifier_override_timeout_sec: Annotated[
        Number, _at("config", "verifier", "override_timeout_sec")
    ]
    verifier_max_timeout_sec: Annotated[Number, _at("config", "verifier", "max_timeout_sec")]
    environment_override_cpus: Annotated[Number, _at("config", "environment", "override_cpus")]
    environment_override_memory_mb: Annotated[
        Number, _at("config", "environment", "override_memory_mb")
    ]
    environment_override_storage_mb: Annotated[
        Number, _at("config", "environment", "override_storage_mb")
    ]
    rewards: Annotated[Any, _at("verifier_result", "rewards")]
    exception_type: Annotated[Text, _at("exception_info", "exception_type")]
    exception_message: Annotated[Any, _at("exception_info", "exception_message")]
    exception_at: Annotated[Text, _at("exception_info", "occurred_at")]
    started_at: Time
    finished_at: Time
    environment_setup_started_at: Annotated[Time, _at("environment_setup", "started_at")]
    environment_setup_finished_at: Annotated[Time, _at("environment_setup", "finished_at")]
    agent_setup_started_at: Annotated[Time, _at("agent_setup", "started_at")]
    agent_setup_finished_at: Annotated[Time, _at("agent_setup", "finished_at")]
    agent_execution_started_at: Annotated[Time, _at("agent_execution", "started_at")]
    agent_execution_finished_at: Annotated[Time, _at("agent_execution", "finished_at")]
    verifier_started_at: Annotated[Time, _at("verifier", "started_at")]
    verifier_finished_at: Annotated[Time, _at("verifier", "finished_at")]


_TRIAL = TypeAdapter(TrialFields)


def parse_result(raw: bytes) -> dict[str, Any] | None:
    """The kept fields of a trial's result.json, or None when the file does not fit them or
    names no trial (then `parse_json` reads it whole)."""
    try:
        fields = _TRIAL.validate_json(raw)
    except ValidationError:
        return None
    return fields if fields.get("task_name") and fields.get("trial_name") else None


def parse_json(raw: bytes) -> Any:
    """pydantic_core's parser, which pydantic ships; json's where it refuses (a lone surrogate,
    a byte-order mark), so that a file is skipped only when json cannot read it either."""
    try:
        return from_json(raw)
    except ValueError:
        return json.loads(raw)
