"""store → one tidy table of trials: the only view of a run the estimators and reports read.

One row per stored trial, with the columns `summarize` expects (task, agent, policy, repeat,
status, ...) and the evidence and telemetry flattened beside them. Retried trials (same key, a
later attempt) keep only their last attempt here; the store keeps both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from levelfield.records import TrialRecord
from levelfield.store import reading


@dataclass(frozen=True)
class RunData:
    info: dict[str, Any]
    trials: pd.DataFrame


def load_run(run_dir: Path) -> RunData:
    with reading(Path(run_dir)) as store:
        info = store.meta()
        records = list(store.records())
    info.setdefault("run_dir", str(Path(run_dir).resolve()))
    return RunData(info, trials_frame(records))


def trials_frame(records: list[TrialRecord]) -> pd.DataFrame:
    latest = _last_attempts(records)
    rows = [_row(r) for r in latest]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    if any(r.limits_disclosed for r in latest):  # a factor only in runs that varied it
        frame["limits_disclosed"] = ["on" if r.limits_disclosed else "off" for r in latest]
    return frame.astype({"repeat": "int64"}) if not frame.empty else frame


def _last_attempts(records: list[TrialRecord]) -> list[TrialRecord]:
    latest: dict[str, TrialRecord] = {}
    for record in records:
        if record.trial_key not in latest or record.attempt > latest[record.trial_key].attempt:
            latest[record.trial_key] = record
    return list(latest.values())


COLUMNS = (
    "trial_key",
    "task",
    "agent",
    "policy",
    "repeat",
    "window",
    "attempt",
    "concurrency",
    "status",
    "reason",
    "reward",
    "backend",
    "memory_spec_bytes",
    "memory_floor_multiple",
    "memory_ceiling_multiple",
    "memory_ceiling_bytes",
    "cpu_ceiling",
    "peak_memory_bytes",
    "oom_kills",
    "memory_failcnt",
    "pids_max_hits",
    "storage_full",
    "cpu_throttled_s",
    "cpu_throttled_periods",
    "cpu_usage_s",
    "duration_s",
    "agent_s",
    "verifier_s",
    "started_at",
    "local_hour",
    "trials_in_flight",
    "host_load1",
    "host_free_memory_bytes",
    "host_id",
    "node",
    "error",
    "api_calls",
    "api_latency_s",
    "api_retries",
    "api_rate_limited",
)


def _row(r: TrialRecord) -> dict[str, Any]:
    e, h, limits = r.evidence, r.telemetry.host, r.limits
    ceiling = limits.get("memory_ceiling_multiple", math.inf)
    calls = r.api_calls
    latencies = [c.latency_s for c in calls if c.outcome == "ok"]
    return {
        "trial_key": r.trial_key,
        "task": r.task,
        "agent": r.agent,
        "policy": r.policy,
        "repeat": r.repeat,
        "window": r.window,
        "attempt": r.attempt,
        "concurrency": r.concurrency,
        "status": r.outcome.value,
        "reason": r.reason.value,
        "reward": r.reward,
        "backend": r.backend,
        "memory_spec_bytes": limits.get("memory_spec_bytes"),
        "memory_floor_multiple": limits.get("memory_floor_multiple"),
        "memory_ceiling_multiple": math.inf if ceiling is None else float(ceiling),
        "memory_ceiling_bytes": limits.get("memory_ceiling_bytes"),
        "cpu_ceiling": limits.get("cpu_ceiling"),
        "peak_memory_bytes": e.memory_peak_bytes,
        "oom_kills": e.oom_kills,
        "memory_failcnt": e.memory_failcnt,
        "pids_max_hits": e.pids_max_hits,
        "storage_full": e.storage_full,
        "cpu_throttled_s": e.cpu_throttled_s,
        "cpu_throttled_periods": e.cpu_throttled_periods,
        "cpu_usage_s": e.cpu_usage_s,
        "duration_s": r.duration_s,
        "agent_s": r.telemetry.phase_s.get("agent"),
        "verifier_s": r.telemetry.phase_s.get("verifier"),
        "started_at": r.started_at,
        "local_hour": h.local_hour,
        "trials_in_flight": h.trials_in_flight,
        "host_load1": h.load1,
        "host_free_memory_bytes": h.free_memory_bytes,
        "host_id": h.host_id,
        "node": h.node or h.host_id,
        "error": r.error,
        "api_calls": len(calls),
        "api_latency_s": sum(latencies) / len(latencies) if latencies else None,
        "api_retries": sum(1 for c in calls if c.attempt > 1),
        "api_rate_limited": sum(1 for c in calls if c.outcome == "rate_limited"),
    }
