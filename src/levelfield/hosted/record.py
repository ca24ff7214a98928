"""What a hosted sandbox writes beside the other harness's result: the trial's limits, kernel
evidence, telemetry and host context, as `record.json` in its record folder (Harbor:
`<trial>/levelfield/record.json`, beside result.json; Inspect: beside the eval log).

The harness's result keeps the reward and the exception; this record keeps what it has no field
for, so that `levelfield import` can classify the trial as a native run would. Schema rule as in
`records.py`: no version means 1, an unknown version is refused rather than misread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from levelfield.records import Evidence, ImageRecord, Telemetry

RECORD_DIR = "levelfield"  # beside result.json, in Harbor's trial directory
RECORD_FILE = "record.json"  # in the record folder a hosted sandbox is given


class CeilingHitNote(BaseModel):
    """A ceiling the kernel enforced during one exec, and what the environment did about it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    exception: str = Field(description="The levelfield exception type, e.g. LevelfieldOOMKilled.")
    message: str
    command: str = Field(description="The exec's command, shortened and with secrets masked.")
    exit_code: int | None
    raised: bool = Field(
        description="Raised from the exec (it failed), or from stop() when the trial did not "
        "pass; false when the agent recovered and the trial passed."
    )


class EnvironmentRecord(BaseModel):
    """One trial of another harness as levelfield's sandbox saw it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: Literal[1] = 1
    trial_name: str
    task: str
    policy: str
    policy_bounds: dict[str, dict[str, str | None]] = Field(
        description="Floor and ceiling per resource, as the policy states them."
    )
    spec: dict[str, float] = Field(description="cpus, memory_bytes, storage_bytes (the 1x).")
    limits: dict[str, Any] = Field(description="The policy applied to the spec (policy.Limits).")
    backend: str = Field(description="The levelfield backend the trial ran on: process or oci.")
    enforcement: str = Field(description="How that backend enforced each floor and ceiling.")
    evidence: Evidence
    telemetry: Telemetry
    ceiling_hits: tuple[CeilingHitNote, ...] = ()
    grader_tampered: tuple[str, ...] = Field(
        (),
        description="Processes not the grader's that touched its files while it ran (the "
        "witness refused them): the agent changed the grader.",
    )
    execs: int = Field(0, description="The harness's exec calls in this trial.")
    image: ImageRecord | None = None
    started_at: str
    finished_at: str
    duration_s: float


def record_path(trial_dir: Path) -> Path:
    """Where a Harbor trial's record lies: `<trial>/levelfield/record.json`."""
    return Path(trial_dir) / RECORD_DIR / RECORD_FILE


def read_record(trial_dir: Path) -> EnvironmentRecord | None:
    """None when the Harbor trial ran on another environment (no levelfield record beside it)."""
    return read_record_file(record_path(trial_dir))


def read_record_file(path: Path) -> EnvironmentRecord | None:
    if not path.is_file():
        return None
    return EnvironmentRecord.model_validate_json(path.read_text())
