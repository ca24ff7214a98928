"""store → one tidy table of trials: the only view of a run the estimators and reports read.

One row per stored trial, with the columns `summarize` expects (task, agent, policy, repeat,
status, ...) and the evidence and telemetry flattened beside them. Retried trials (same key, a
later attempt) keep only their last attempt here; the store keeps both.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from levelfield.analysis import table_cache
from levelfield.errors import StoreError
from levelfield.records import (
    DEFAULT_WINDOW,
    KILLED_CAUSE_UNKNOWN,
    UNCLASSIFIED,
    Evidence,
    TrialRecord,
)
from levelfield.store import reading, without_cycle_collection


@dataclass(frozen=True)
class RunData:
    info: dict[str, Any]
    trials: pd.DataFrame


def load_run(run_dir: Path) -> RunData:
    """The run's metadata and tidy table. The table is kept in RUN/table-cache.npz for the
    store's current content (table_cache.py): a leaderboard's 24,000 records take a second to
    read, the cached table a tenth of one."""
    run_dir = Path(run_dir)
    with reading(run_dir) as store:
        info = store.meta()
        version = store.version()
        frame = table_cache.read(run_dir, version)
        if frame is None:
            with without_cycle_collection():
                frame = frame_of_documents(list(store.documents()))
            table_cache.write(run_dir, version, frame)
    info.setdefault("run_dir", str(run_dir.resolve()))
    return RunData(info, frame)


def prepare(run_dir: Path, documents: Sequence[dict[str, Any]] = ()) -> None:
    """Cache the run's table. When `documents`, the records as stored, are its whole content
    (an import into a new run holds them): the same table `load_run` builds from the store,
    without reading 24,000 records back. Otherwise (none given, or others stored meanwhile)
    the records are read back."""
    with reading(run_dir) as store:
        version = store.version()
    if version[0] != len(documents):
        load_run(run_dir)
        return
    with without_cycle_collection():  # the store's order: load_run's rows are the same rows
        ordered = sorted(documents, key=_finished_at)
        table_cache.write(run_dir, version, frame_of_documents(ordered))


def _finished_at(document: dict[str, Any]) -> str:
    return document["finished_at"]


def trials_frame(records: Iterable[TrialRecord]) -> pd.DataFrame:
    """The table of records in hand (a run's are read by `load_run`)."""
    return frame_of_documents([r.model_dump(mode="json") for r in records])


def frame_of_documents(documents: list[dict[str, Any]]) -> pd.DataFrame:
    """The table of records in their stored JSON form. The store holds only records that
    validated as they were written (`row_of`; the Harbor import builds its own from values of
    known types, tests/integration/test_leaderboard_import.py checks this table against the
    validated one), so they are read without validating each again: that was most of the
    table's cost on a leaderboard. A field a record leaves out has its model's default."""
    latest = _last_attempts(documents)
    rows = [_checked_row(d) for d in latest]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    if any(d.get("limits_disclosed") for d in latest):  # a factor only in runs that varied it
        frame["limits_disclosed"] = ["on" if d.get("limits_disclosed") else "off" for d in latest]
    return frame.astype({"repeat": "int64"}) if not frame.empty else frame


def _checked_row(document: dict[str, Any]) -> dict[str, Any]:
    """A record that does not read (a store from elsewhere, edited by hand) is named with what
    its model says is wrong with it, not a KeyError from deep in the table."""
    try:
        return _row(document)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        key = document.get("trial_key", "?")
        try:
            TrialRecord.model_validate(document)
        except ValidationError as invalid:
            raise StoreError(f"the record of trial {key} does not load: {invalid}") from None
        raise StoreError(f"the record of trial {key} does not load: {exc!r}") from exc


def _last_attempts(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for document in documents:
        key, attempt = document["trial_key"], document.get("attempt", 1)
        if key not in latest or attempt > latest[key].get("attempt", 1):
            latest[key] = document
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


# The defaults of what a stored record may leave out (a Harbor import writes only what differs).
_EVIDENCE = Evidence().model_dump(mode="json")


def _row(r: dict[str, Any]) -> dict[str, Any]:
    e, telemetry, limits = {**_EVIDENCE, **r["evidence"]}, r["telemetry"], r["limits"]
    h = telemetry["host"]
    # None is a ceiling of "none" (uncapped); no key at all is a run that did not know its
    # ceiling (an import), which the reports show as "unknown"
    ceiling = limits.get("memory_ceiling_multiple", math.nan)
    calls = r.get("api_calls") or ()
    latencies = [c["latency_s"] for c in calls if c["outcome"] == "ok"]
    image, harbor, phase_s = r.get("image"), r.get("harbor"), telemetry.get("phase_s") or {}
    notes = e["notes"]
    return {
        "trial_key": r["trial_key"],
        "task": r["task"],
        "agent": r["agent"],
        "policy": r["policy"],
        "repeat": r["repeat"],
        "window": r.get("window", DEFAULT_WINDOW),
        "attempt": r.get("attempt", 1),
        "concurrency": r.get("concurrency", 1),
        "status": r["outcome"],
        "reason": r["reason"],
        "reward": _float(r.get("reward")),
        "backend": r["backend"],
        "image": image["name"] if image else None,
        "image_digest": image["digest"] if image else None,
        "image_source": image["source"] if image else None,
        "memory_spec_bytes": limits.get("memory_spec_bytes"),
        "memory_floor_multiple": limits.get("memory_floor_multiple"),
        "memory_ceiling_multiple": math.inf if ceiling is None else float(ceiling),
        "memory_ceiling_bytes": limits.get("memory_ceiling_bytes"),
        "cpu_ceiling": limits.get("cpu_ceiling"),
        "peak_memory_bytes": e["memory_peak_bytes"],
        "oom_kills": e["oom_kills"],
        "memory_failcnt": e["memory_failcnt"],
        "pids_max_hits": e["pids_max_hits"],
        "storage_full": e["storage_full"],
        "killed_cause_unknown": any(n.startswith(KILLED_CAUSE_UNKNOWN) for n in notes),
        # an imported infra error that only an unclassified exception made one
        "unclassified": any(n.startswith(UNCLASSIFIED) for n in notes),
        "cpu_throttled_s": float(e["cpu_throttled_s"]),
        "cpu_throttled_periods": e["cpu_throttled_periods"],
        "cpu_usage_s": _float(e["cpu_usage_s"]),
        "duration_s": float(r["duration_s"]),
        "agent_s": _float(phase_s.get("agent")),
        "verifier_s": _float(phase_s.get("verifier")),
        "started_at": r["started_at"],
        "local_hour": h["local_hour"],
        "trials_in_flight": h["trials_in_flight"],
        "host_load1": _float(h.get("load1")),
        "host_free_memory_bytes": h["free_memory_bytes"],
        "host_id": h["host_id"],
        "node": h.get("node") or h["host_id"],
        # Where an imported trial ran (Harbor's docker, daytona, modal...); our own: the backend.
        "sandbox_provider": harbor.get("sandbox_provider") if harbor else r["backend"],
        "harbor_agent": harbor.get("agent_name") if harbor else None,
        "harbor_model": harbor.get("model") if harbor else None,
        "error": r.get("error"),
        "api_calls": len(calls),
        "api_latency_s": sum(latencies) / len(latencies) if latencies else None,
        "api_retries": sum(1 for c in calls if c["attempt"] > 1),
        "api_rate_limited": sum(1 for c in calls if c["outcome"] == "rate_limited"),
        "trajectory": r.get("trajectory"),
        "tokens_in": r.get("tokens_in"),
        "tokens_out": r.get("tokens_out"),
        "cost_usd": _float(r.get("cost_usd")),
        **_hidden_columns(r, telemetry, h),
    }


def _float(value: Any) -> float | None:
    """A float field as its model holds it: JSON may write a whole number without its point."""
    return None if value is None else float(value)


def _hidden_columns(
    r: dict[str, Any], telemetry: dict[str, Any], host: dict[str, Any]
) -> dict[str, Any]:
    """Pressure is the share of the trial's wall time with some work stalled (PSI `some`), in
    percent; steal likewise. Absent readings are None, never 0: a kernel without PSI is not a
    healthy host."""
    network = (telemetry.get("network") or {}).get("trial")
    health = telemetry.get("health")
    probe = host.get("index_probe")
    row: dict[str, Any] = {
        "weekday": datetime.fromisoformat(r["started_at"]).astimezone(UTC).strftime("%a"),
        "net_rx_bytes": network.get("rx_bytes", 0) if network else None,
        "net_tx_bytes": network.get("tx_bytes", 0) if network else None,
        "net_busy_s": float(network.get("busy_s", 0.0)) if network else None,
        "net_throughput_bps": _float(network.get("throughput_bps")) if network else None,
        "index_probe_bps": _float(probe.get("throughput_bps")) if probe else None,
        "steal_pct": None,
        "admission_wait_s": _float(health.get("admission_wait_s")) if health else None,
    }
    pressure = (health.get("host_pressure") or {}) if health else {}
    for resource in ("cpu", "memory", "io"):
        use = pressure.get(resource)
        over = use.get("over_s", 0.0) if use else 0.0
        share = use["some_stall_s"] / over if use and over > 0 else None
        row[f"{resource}_pressure_pct"] = None if share is None else 100 * share
    if health is not None and health.get("steal_share") is not None:
        row["steal_pct"] = 100 * health["steal_share"]
    return row
