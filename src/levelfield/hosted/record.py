"""Where a hosted sandbox keeps its record beside the other harness's result, and how it is read
back: the one record type every trial has, a `TrialRecord` (`lifecycle.py` writes it), as
`record.json` in its record folder (Harbor: `<trial>/levelfield/record.json`, beside result.json;
Inspect: beside the eval log).

The harness's result keeps the reward and the exception; the record keeps what it has no field
for (limits, kernel evidence, telemetry, host context, the ceiling hits per exec), so that
`levelfield import` decides the trial as a native run would. Records written before there was one
record type (`EnvironmentRecord`, same schema rule: no version means 1) are read and upgraded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from levelfield.outcome import PhaseLog, decide
from levelfield.records import CeilingHitNote, Evidence, ImageRecord, Telemetry, TrialRecord

RECORD_DIR = "levelfield"  # beside result.json, in Harbor's trial directory
RECORD_FILE = "record.json"  # in the record folder a hosted sandbox is given


class EnvironmentRecord(BaseModel):
    """A hosted trial's record as written before there was one record type: read, upgraded."""

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


def read_record(trial_dir: Path) -> TrialRecord | None:
    """None when the Harbor trial ran on another environment (no levelfield record beside it)."""
    return read_record_file(record_path(trial_dir))


def read_record_file(path: Path) -> TrialRecord | None:
    if not path.is_file():
        return None
    text = path.read_text()
    if '"trial_key"' in text:
        return TrialRecord.model_validate_json(text)
    return upgrade(EnvironmentRecord.model_validate_json(text))


def upgrade(old: EnvironmentRecord) -> TrialRecord:
    """An `EnvironmentRecord` as the one record type; its verdict decided from what it holds."""
    evidence = old.evidence.model_copy(update={"tampered": old.grader_tampered})
    decision = decide(PhaseLog(evidence=evidence, tampered=old.grader_tampered))
    return TrialRecord(
        trial_key=old.trial_name,
        run_id="",
        task=old.task,
        agent="hosted",
        policy=old.policy,
        repeat=1,
        backend=old.backend,
        outcome=decision.outcome,
        reason=decision.reason,
        limits=old.limits,
        evidence=evidence,
        telemetry=old.telemetry,
        image=old.image,
        started_at=old.started_at,
        finished_at=old.finished_at,
        duration_s=old.duration_s,
        spec=old.spec,
        policy_bounds=old.policy_bounds,
        enforcement=old.enforcement,
        ceiling_hits=old.ceiling_hits,
        execs=old.execs,
    )
