"""Inspect logs (`.eval`) → one levelfield run (`levelfield import inspect LOG...`), so that
`report`, `compare` and `leaderboard` work on Inspect results.

Each logged sample (task × epoch) becomes a trial; its agent is the eval's model (or `--label`).
A sample that ran in levelfield's sandbox has its record beside the log
(`<log>.levelfield/<sample>__e<epoch>__a<attempt>/record.json`, written by `sandbox.py`): the trial
gets its policy, limits, evidence and telemetry, and its reason as a native trial gets it
(`outcome.classify`: kernel evidence first, then a levelfield exception by its class, then the
reward), so the OOM-killed sample imports as `infra_error / oom_killed`. A sample that ran in
another sandbox has no record: its error (Inspect's own, of any kind) is a `harness_error`, its
score the verdict. Attempts Inspect retried (`--retry-on-error`) stay with the trial's evidence.

Importing again is idempotent: a trial's key derives from its label, the log's file name, the
sample and its epoch. The whole import is committed in one transaction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inspect_ai.log import EvalLog, EvalSample, read_eval_log
from inspect_ai.scorer import value_to_float

from levelfield.errors import InputError
from levelfield.hosted.record import read_record_file
from levelfield.inspect.config import record_folder_name
from levelfield.outcome import PhaseLog, decide, levelfield_error, outcome_of
from levelfield.plan import trial_key
from levelfield.records import Evidence, Reason, TrialRecord
from levelfield.store import Store, row_of

IMPORTED_POLICY = "imported"
ENFORCEMENT = "unknown: Inspect's own sandboxes record no limits"
_TYPE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*): ")


@dataclass(frozen=True, slots=True)
class InspectImport:
    run_dir: Path
    imported: int
    already_stored: int
    skipped: tuple[str, ...] = ()
    labels: dict[str, int] = field(default_factory=dict)  # label → samples found


def import_inspect(paths: Sequence[Path], out: Path, *, label: str | None = None) -> InspectImport:
    """Every sample of the logs under `paths` (`.eval` files, or folders of them) into `out`."""
    logs = sorted({log for p in paths for log in _log_files(Path(p))})
    if not logs:
        raise InputError(f"{', '.join(map(str, paths))}: no Inspect log (.eval) found")
    skipped: list[str] = []
    records: list[TrialRecord] = []
    for path in logs:
        try:
            log = read_eval_log(str(path))
        except Exception as exc:  # a log Inspect itself cannot read: named, the others go on
            skipped.append(f"{path}: {type(exc).__name__}: {exc}"[:500])
            continue
        records.extend(_records(path, log, label, skipped))
    with Store.open_for_writing(out) as store:
        meta = store.meta()
        stored = store.stored_keys()
        new = [r for r in records if r.trial_key not in stored]
        run_id = meta.get("run_id") or (label or f"inspect-{Path(paths[0]).resolve().stem}")
        store.commit_rows(row_of(r.model_copy(update={"run_id": run_id})) for r in new)
        store.set_meta(_meta(meta, run_id, paths, records))
    counts: dict[str, int] = {}
    for r in records:
        counts[r.agent] = counts.get(r.agent, 0) + 1
    return InspectImport(out, len(new), len(records) - len(new), tuple(skipped), counts)


def _log_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
    elif path.is_dir():
        yield from path.rglob("*.eval")
    else:
        raise InputError(f"{path}: no such file or directory")


def _records(
    path: Path, log: EvalLog, label: str | None, skipped: list[str]
) -> Iterator[TrialRecord]:
    agent = label or log.eval.model
    beside = path.parent / f"{path.stem}.levelfield"
    for sample in log.samples or []:
        try:
            yield _record(path, log, sample, agent, beside)
        except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            skipped.append(f"{path}: sample {sample.id} epoch {sample.epoch}: {exc}"[:500])


def _record(path: Path, log: EvalLog, sample: EvalSample, agent: str, beside: Path) -> TrialRecord:
    attempts = 1 + len(sample.error_retries or [])
    folder = beside / record_folder_name(str(sample.id), sample.epoch, attempts)
    record = read_record_file(folder / "record.json")
    task = str((sample.metadata or {}).get("task_name") or sample.id)
    error = sample.error.message if sample.error else None
    reward = _reward(sample)
    reason = _reason(record, error, reward)
    policy = record.policy if record is not None else IMPORTED_POLICY
    started = _time(sample.started_at) or _time(log.eval.created) or datetime.now(UTC)
    finished = _time(sample.completed_at) or started
    notes = [
        f"Inspect attempt {n} of {attempts}: {retry.message}"[:1000]
        for n, retry in enumerate(sample.error_retries or [], 1)
    ]
    return TrialRecord(
        trial_key=trial_key(task, agent, policy, sample.epoch, f"{path.name}/{sample.id}"),
        run_id="",
        task=task,
        agent=agent,
        policy=policy,
        repeat=sample.epoch,
        attempt=attempts,
        backend=f"inspect/{record.backend if record else _sandbox_type(log)}",
        outcome=outcome_of(reason),
        reason=reason,
        reward=reward,
        error=error[:2000] if error else None,
        limits=record.limits if record else {},
        evidence=_evidence(record, notes),
        telemetry=record.telemetry if record else _bare_telemetry(started),
        image=record.image if record else None,
        started_at=started.isoformat(),
        finished_at=finished.isoformat(),
        duration_s=float(sample.total_time or 0.0),
    )


def _reason(record: TrialRecord | None, error: str | None, reward: float | None) -> Reason:
    """As a native trial: kernel evidence, then the error by its class (any error that is not
    levelfield's is the harness's), then the reward."""
    exc = _error_of(error)
    evidence = record.evidence if record is not None else None
    tampered = record.evidence.tampered if record is not None else ()
    log = PhaseLog(evidence=evidence, reward=reward, error=exc, tampered=tampered)
    return decide(log).reason


def _error_of(message: str | None) -> BaseException | None:
    """A levelfield exception rebuilt from Inspect's `Type: message`, so that its class decides;
    any other error as a plain RuntimeError (Inspect's own errors are the harness's)."""
    if message is None:
        return None
    found = _TYPE.match(message)
    rebuilt = levelfield_error(found.group(1)) if found else None
    return rebuilt if rebuilt is not None else RuntimeError(message)


def _reward(sample: EvalSample) -> float | None:
    """The first scorer's value as a number (C/I, booleans and numbers alike)."""
    if not sample.scores:
        return None
    score = next(iter(sample.scores.values()))
    return float(value_to_float()(score.value))


def _evidence(record: TrialRecord | None, notes: list[str]) -> Evidence:
    if record is None:
        return Evidence(notes=("ran in Inspect's own sandbox: no kernel evidence", *notes))
    said = f"ran in levelfield's Inspect sandbox ({record.backend}, policy {record.policy})"
    return record.evidence.model_copy(update={"notes": (said, *record.evidence.notes, *notes)})


def _bare_telemetry(started: datetime) -> dict[str, Any]:
    return {
        "host": {
            "host_id": "inspect",
            "started_at": started.isoformat(),
            "local_hour": started.hour,
            "free_memory_bytes": 0,
            "trials_in_flight": 0,
        }
    }


def _sandbox_type(log: EvalLog) -> str:
    return log.eval.sandbox.type if log.eval.sandbox is not None else "none"


def _time(text: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def _meta(
    meta: dict[str, Any], run_id: str, paths: Sequence[Path], records: list[TrialRecord]
) -> dict[str, Any]:
    sources = list(
        dict.fromkeys([*meta.get("sources", []), *(str(Path(p).resolve()) for p in paths)])
    )
    policies = {**meta.get("policies", {}), **{r.policy: {} for r in records}}
    return {
        "run_id": run_id,
        "backend": "inspect",
        "source": sources[0],
        "sources": sources,
        "enforcement": meta.get("enforcement", ENFORCEMENT),
        "concurrency": "unknown: Inspect's logs do not record it per sample",
        "policies": policies,
    }
