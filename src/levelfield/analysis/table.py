"""store → one tidy table of trials: the only view of a run the estimators and reports read.

One row per stored trial, with the columns `summarize` expects (task, agent, policy, repeat,
status, ...) and the evidence and telemetry flattened beside them. Retried trials (same key, a
later attempt) keep only their last attempt here; the store keeps both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from levelfield.analysis import table_cache
from levelfield.records import KILLED_CAUSE_UNKNOWN, UNCLASSIFIED, TrialRecord
from levelfield.store import reading


@dataclass(frozen=True)
class RunData:
    info: dict[str, Any]
    trials: pd.DataFrame


def load_run(run_dir: Path) -> RunData:
    """The run's metadata and tidy table. The table is kept in RUN/table-cache.npz for the
    store's current content (table_cache.py): a leaderboard's 24,000 records take seconds to
    validate, the cached table a tenth of one."""
    run_dir = Path(run_dir)
    with reading(run_dir) as store:
        info = store.meta()
        version = store.version()
        frame = table_cache.read(run_dir, version)
        if frame is None:
            frame = trials_frame(list(store.records()))
            table_cache.write(run_dir, version, frame)
    info.setdefault("run_dir", str(run_dir.resolve()))
    return RunData(info, frame)


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


# The hidden variables of the host and its network (records.Telemetry.network and .health).
HIDDEN_COLUMNS = (
    "weekday",
    "net_rx_bytes",
    "net_tx_bytes",
    "net_busy_s",
    "net_throughput_bps",
    "index_probe_bps",
    "cpu_pressure_pct",
    "memory_pressure_pct",
    "io_pressure_pct",
    "steal_pct",
    "admission_wait_s",
)
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
    "image",
    "image_digest",
    "image_source",
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
    "killed_cause_unknown",
    "unclassified",
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
    "sandbox_provider",
    "harbor_agent",
    "harbor_model",
    "error",
    "api_calls",
    "api_latency_s",
    "api_retries",
    "api_rate_limited",
    "trajectory",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    *HIDDEN_COLUMNS,
)


def _row(r: TrialRecord) -> dict[str, Any]:
    e, h, limits = r.evidence, r.telemetry.host, r.limits
    # None is a ceiling of "none" (uncapped); no key at all is a run that did not know its
    # ceiling (an import), which the reports show as "unknown"
    ceiling = limits.get("memory_ceiling_multiple", math.nan)
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
        "image": r.image.name if r.image else None,
        "image_digest": r.image.digest if r.image else None,
        "image_source": r.image.source if r.image else None,
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
        "killed_cause_unknown": any(n.startswith(KILLED_CAUSE_UNKNOWN) for n in e.notes),
        # an imported infra error that only an unclassified exception made one
        "unclassified": any(n.startswith(UNCLASSIFIED) for n in e.notes),
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
        # Where an imported trial ran (Harbor's docker, daytona, modal...); our own: the backend.
        "sandbox_provider": r.harbor.sandbox_provider if r.harbor else r.backend,
        "harbor_agent": r.harbor.agent_name if r.harbor else None,
        "harbor_model": r.harbor.model if r.harbor else None,
        "error": r.error,
        "api_calls": len(calls),
        "api_latency_s": sum(latencies) / len(latencies) if latencies else None,
        "api_retries": sum(1 for c in calls if c.attempt > 1),
        "api_rate_limited": sum(1 for c in calls if c.outcome == "rate_limited"),
        "trajectory": r.trajectory,
        "tokens_in": r.tokens_in,
        "tokens_out": r.tokens_out,
        "cost_usd": r.cost_usd,
        **_hidden_columns(r),
    }


def _hidden_columns(r: TrialRecord) -> dict[str, Any]:
    """Pressure is the share of the trial's wall time with some work stalled (PSI `some`), in
    percent; steal likewise. Absent readings are None, never 0: a kernel without PSI is not a
    healthy host."""
    network = r.telemetry.network.get("trial")
    health = r.telemetry.health
    probe = r.telemetry.host.index_probe
    row: dict[str, Any] = {
        "weekday": datetime.fromisoformat(r.started_at).astimezone(UTC).strftime("%a"),
        "net_rx_bytes": network.rx_bytes if network else None,
        "net_tx_bytes": network.tx_bytes if network else None,
        "net_busy_s": network.busy_s if network else None,
        "net_throughput_bps": network.throughput_bps if network else None,
        "index_probe_bps": probe.throughput_bps if probe else None,
        "steal_pct": None,
        "admission_wait_s": health.admission_wait_s if health else None,
    }
    for resource in ("cpu", "memory", "io"):
        use = health.host_pressure.get(resource) if health else None
        share = use.some_stall_s / use.over_s if use and use.over_s > 0 else None
        row[f"{resource}_pressure_pct"] = None if share is None else 100 * share
    if health is not None and health.steal_share is not None:
        row["steal_pct"] = 100 * health.steal_share
    return row
