"""What lies beside a Harbor trial's result.json → what the import adds to its record.

Two kinds of trial folder have more to say than result.json:

- one that levelfield's Harbor environment ran (`environment.py`) holds `levelfield/record.json`
  (`record.py`): the policy, limits, kernel evidence and telemetry. The import then classifies the
  trial as a native run would (`outcome.classify`: kernel evidence outranks the reward), keeps
  the policy's name, and books a LevelfieldOOMKilled and its siblings by their class;
- one that Harbor ran on its own environments holds `agent/exit-code.txt` (the oracle writes it
  when the solution exits non-zero) and the agent's log (`agent/*.txt`). An agent killed by
  SIGKILL (137, or the shell's "Killed") with no exception may have been OOM-killed or killed by
  anything else: nothing proves the cause, so the reward's verdict stands and the evidence says
  "killed, cause unknown", which the report counts per configuration.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levelfield.harbor.record import RECORD_DIR, read_record
from levelfield.harbor.trial_file import HarborTrial
from levelfield.records import KILLED_CAUSE_UNKNOWN, TrialRecord

KILLED_NOTE = KILLED_CAUSE_UNKNOWN
SIGKILL_EXIT = 137
LOG_TAIL_BYTES = 64 * 1024  # the end of each agent log: where a kill is reported
_KILLED_LINE = re.compile(r"^.*\bKilled\b.*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Beside:
    """What a trial folder holds beside result.json; all None/empty on a bare folder."""

    record: TrialRecord | None = None
    record_problem: str | None = None
    agent_exit_code: int | None = None
    killed_line: str | None = None  # the agent log's line that reports a kill


def read_beside(trial_dir: str, trial: HarborTrial, subdirs: Collection[str]) -> Beside | None:
    """None when the folder holds nothing that changes the record (the usual case). Never
    raises: an unreadable record is named in `record_problem`, the rest still read. `subdirs`
    are the folder's sub-folders as the walk listed them, so that a bare folder costs no system
    call here. Agent logs are searched only where a kill could matter: no exception and no pass
    (a leaderboard import reads tens of thousands of folders)."""
    record, problem = None, None
    if RECORD_DIR in subdirs:
        try:
            record = read_record(Path(trial_dir))
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            problem = f"levelfield/record.json unreadable: {type(exc).__name__}: {exc}"[:500]
    if record is not None or trial.exception_type is not None or (trial.reward or 0) >= 1:
        return Beside(record, problem) if record is not None or problem else None
    if "agent" not in subdirs:
        return Beside(None, problem) if problem else None
    agent_dir = os.path.join(trial_dir, "agent")
    found = Beside(None, problem, _exit_code(agent_dir), _killed_line(agent_dir))
    return found if found != Beside() else None


def _exit_code(agent_dir: str) -> int | None:
    try:
        with open(os.path.join(agent_dir, "exit-code.txt")) as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None


def _killed_line(agent_dir: str) -> str | None:
    try:
        names = sorted(os.listdir(agent_dir))
    except OSError:
        return None
    for name in names:
        path = os.path.join(agent_dir, name)
        if not name.endswith(".txt") or name == "exit-code.txt" or not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as file:
                file.seek(max(0, os.path.getsize(path) - LOG_TAIL_BYTES))
                tail = file.read().decode(errors="replace")
        except OSError:
            continue
        found = _KILLED_LINE.findall(tail)
        if found:
            return f"{name}: {found[-1].strip()[:200]}"
    return None


def with_beside(
    fields: dict[str, Any], beside: Beside, exception_type: str | None
) -> dict[str, Any]:
    """The record's fields (importing._record) with what lay beside result.json added. The
    verdict is the import's already, decided once with the record's evidence where there is
    one; beside it lie the record's limits and telemetry, or words."""
    if beside.record is not None:
        return _with_record(fields, beside.record)
    notes = list(_notes(fields))
    if beside.record_problem:
        notes.append(beside.record_problem)
    killed = beside.agent_exit_code == SIGKILL_EXIT or beside.killed_line is not None
    if killed and exception_type is None:
        notes.append(_killed_note(beside))
    if len(notes) == len(tuple(_notes(fields))):
        return fields  # nothing beside it to add: keep the import's shared evidence
    return {**fields, "evidence": {"notes": tuple(notes)}}


def _notes(fields: dict[str, Any]) -> tuple[str, ...]:
    """The import's evidence notes, whether it passed an Evidence or its fields."""
    evidence = fields["evidence"]
    return tuple(evidence.notes if hasattr(evidence, "notes") else evidence.get("notes", ()))


def _killed_note(beside: Beside) -> str:
    said = []
    if beside.agent_exit_code == SIGKILL_EXIT:
        said.append("agent/exit-code.txt says 137 (SIGKILL)")
    if beside.killed_line:
        said.append(f"the agent's log says '{beside.killed_line}'")
    return (
        f"{KILLED_NOTE}: {' and '.join(said)}; Harbor recorded no exception and no kernel "
        "evidence, so the reward's verdict stands (an OOM kill would be infrastructure's)"
    )


def _with_record(fields: dict[str, Any], record: TrialRecord) -> dict[str, Any]:
    """The record's limits, evidence and telemetry beside the verdict the import reached with
    its evidence (kernel counters first, as a native trial's)."""
    notes = (
        f"ran on levelfield's Harbor environment ({record.backend}, policy {record.policy}): "
        "kernel evidence from levelfield/record.json",
        *record.evidence.notes,
        *(n for n in _notes(fields) if not n.startswith("imported from")),
    )
    return {
        **fields,
        "policy": record.policy,
        "backend": f"harbor/{record.backend}",
        "reason": fields["reason"],
        "outcome": fields["outcome"],
        "limits": record.limits,
        "evidence": record.evidence.model_copy(update={"notes": notes}).model_dump(),
        "telemetry": record.telemetry.model_dump(),
        "image": record.image.model_dump() if record.image else None,
    }
