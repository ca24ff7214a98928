"""A Harbor job directory → a levelfield run, so its trials can be analysed here.

Harbor writes one `result.json` per trial (`TrialResult`: task_name, trial_name, agent_info,
verifier_result.rewards, exception_info, started_at, finished_at). Harbor records no kernel
evidence, so the reason comes from its exception type alone; every imported record says so in
its evidence notes, and the policy is "harbor" (whatever the job's environment enforced).
Importing again is idempotent: each trial's key derives from its Harbor trial name.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from levelfield.errors import InputError
from levelfield.outcome import outcome_of, reason_for_reward
from levelfield.plan import trial_key
from levelfield.records import Evidence, HostContext, PhaseResult, Reason, Telemetry, TrialRecord
from levelfield.store import Store
from levelfield.verifier import parse_reward_json

HARBOR_POLICY = "harbor"
# Harbor's exception class names (harbor/trial, harbor/verifier, harbor/environments) → reasons.
REASON_OF_HARBOR_EXCEPTION = {
    "AgentTimeoutError": Reason.AGENT_TIMEOUT,
    "VerifierTimeoutError": Reason.VERIFIER_TIMEOUT,
    "RewardFileNotFoundError": Reason.VERIFIER_ERROR,
    "RewardFileEmptyError": Reason.VERIFIER_ERROR,
    "VerifierOutputParseError": Reason.VERIFIER_ERROR,
    "AddTestsDirError": Reason.SANDBOX_ERROR,
    "DownloadVerifierDirError": Reason.SANDBOX_ERROR,
    "EnvironmentStartTimeoutError": Reason.SANDBOX_ERROR,
    "AgentSetupTimeoutError": Reason.AGENT_SETUP_FAILED,  # the agent was never installed
}
# Provider SDK errors that survived Harbor's retries: the API failed, not the agent.
_API_ERROR = re.compile(r"RateLimit|APIError|APIConnection|APIStatus|Overloaded|ServiceUnavailable")
_OOM_TEXT = re.compile(r"OOMKilled|out of memory|exit code 137", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ImportResult:
    run_dir: Path
    imported: int
    already_stored: int
    skipped: tuple[str, ...]


def import_harbor_job(job_dir: Path, out: Path) -> ImportResult:
    results = _trial_results(job_dir)
    if not results:
        raise InputError(f"{job_dir}: no Harbor trial result.json found")
    skipped: list[str] = []
    records: list[TrialRecord] = []
    for path, data in _with_repeats(results):
        try:
            records.append(_record(data))
        except (KeyError, TypeError, ValueError) as exc:
            skipped.append(f"{path}: {exc}")
    with Store.open_for_writing(out) as store:
        meta = store.meta()
        run_id = meta.get("run_id") or f"harbor-{Path(job_dir).resolve().name}"
        store.set_meta(
            {
                "run_id": run_id,
                "backend": "harbor",
                "source": str(job_dir.resolve()),
                "enforcement": "unknown: imported from Harbor, no kernel evidence",
                "policies": {HARBOR_POLICY: {}},
            }
        )
        stored = store.stored_keys()
        new = [
            r.model_copy(update={"run_id": run_id}) for r in records if r.trial_key not in stored
        ]
        for record in new:
            store.commit(record)
    return ImportResult(out, len(new), len(records) - len(new), tuple(skipped))


def _trial_results(job_dir: Path) -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted(Path(job_dir).rglob("result.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(data, dict) and "task_name" in data and "trial_name" in data:
            found.append((path, data))
    return found


def _with_repeats(results: list[tuple[Path, dict[str, Any]]]) -> list[tuple[Path, dict[str, Any]]]:
    """Repeats numbered per (task, agent) in start order, as Harbor's n_attempts would be."""
    groups: dict[tuple[str, str], list[tuple[Path, dict[str, Any]]]] = defaultdict(list)
    for path, data in results:
        groups[(data["task_name"], _agent(data))].append((path, data))
    out = []
    for members in groups.values():
        members.sort(key=lambda m: (m[1].get("started_at") or "", m[1]["trial_name"]))
        out += [(path, {**data, "_repeat": i}) for i, (path, data) in enumerate(members, 1)]
    return out


def _agent(data: dict[str, Any]) -> str:
    info = data.get("agent_info") or {}
    name = info.get("name") or "unknown"
    model = (info.get("model_info") or {}).get("name")
    return f"{name}:{model}" if model else name


def reason_for_harbor(data: dict[str, Any]) -> Reason:
    exc = data.get("exception_info")
    if exc:
        kind, message = exc.get("exception_type", ""), exc.get("exception_message", "")
        if kind in REASON_OF_HARBOR_EXCEPTION:
            return REASON_OF_HARBOR_EXCEPTION[kind]
        if _API_ERROR.search(kind):
            return Reason.API_ERROR
        if _OOM_TEXT.search(message):
            return Reason.OOM_KILLED
        return Reason.HARNESS_ERROR
    return reason_for_reward(harbor_reward(data))


def harbor_reward(data: dict[str, Any]) -> float | None:
    rewards = (data.get("verifier_result") or {}).get("rewards")
    return parse_reward_json(json.dumps(rewards)) if rewards is not None else None


def _record(data: dict[str, Any]) -> TrialRecord:
    reason = reason_for_harbor(data)
    started = _time(data.get("started_at"))
    finished = _time(data.get("finished_at")) or started
    exc = data.get("exception_info") or {}
    return TrialRecord(
        trial_key=trial_key(
            data["task_name"], _agent(data), HARBOR_POLICY, data["_repeat"], data["trial_name"]
        ),
        run_id="",
        task=data["task_name"],
        agent=_agent(data),
        policy=HARBOR_POLICY,
        repeat=data["_repeat"],
        backend="harbor",
        outcome=outcome_of(reason),
        reason=reason,
        reward=harbor_reward(data),
        error=f"{exc['exception_type']}: {exc.get('exception_message', '')}"[:2000]
        if exc
        else None,
        limits={"memory_ceiling_multiple": None},
        agent_phase=PhaseResult(
            timed_out=reason is Reason.AGENT_TIMEOUT, duration_s=_span(data.get("agent_execution"))
        ),
        verifier_phase=PhaseResult(
            timed_out=reason is Reason.VERIFIER_TIMEOUT, duration_s=_span(data.get("verifier"))
        ),
        evidence=Evidence(
            notes=("imported from Harbor: reason from its exception type, no kernel evidence",)
        ),
        telemetry=Telemetry(
            host=HostContext(
                host_id="harbor",
                started_at=(started or datetime.now(UTC)).isoformat(),
                local_hour=(started.hour if started else 0),
                load1=None,
                free_memory_bytes=0,
                trials_in_flight=0,
            )
        ),
        started_at=(started or datetime.now(UTC)).isoformat(),
        finished_at=(finished or datetime.now(UTC)).isoformat(),
        duration_s=(finished - started).total_seconds() if started and finished else 0.0,
    )


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _span(timing: dict[str, Any] | None) -> float:
    if not timing:
        return 0.0
    start, end = _time(timing.get("started_at")), _time(timing.get("finished_at"))
    return (end - start).total_seconds() if start and end else 0.0
