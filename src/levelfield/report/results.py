"""The per-trial table of `levelfield results`: one row a trial, as stored."""

from __future__ import annotations

import json
from collections.abc import Iterable

from rich.table import Table

from levelfield._units import format_bytes
from levelfield.analysis.jsonable import to_jsonable
from levelfield.records import Outcome, TrialRecord

STYLE_OF = {Outcome.PASSED: "green", Outcome.FAILED: "red", Outcome.INFRA_ERROR: "yellow"}


def results_table(records: Iterable[TrialRecord]) -> Table:
    table = Table(title="trials", header_style="bold")
    for name in (
        "task",
        "agent",
        "policy",
        "rep",
        "window",
        "status",
        "reason",
        "peak mem",
        "mem ceiling",
        "throttled",
        "agent s",
        "verifier s",
        "total s",
    ):
        table.add_column(
            name, justify="right" if name.endswith(("s", "mem", "ceiling", "rep")) else "left"
        )
    for r in sorted(records, key=lambda r: (r.task, r.agent, r.policy, r.window, r.repeat)):
        phases = r.telemetry.phase_s
        table.add_row(
            r.task,
            r.agent,
            r.policy,
            str(r.repeat),
            r.window,
            f"[{STYLE_OF[r.outcome]}]{r.outcome.value}[/]",
            r.reason.value,
            format_bytes(r.evidence.memory_peak_bytes),
            format_bytes(r.limits.get("memory_ceiling_bytes")),
            _throttled(r),
            _secs(phases.get("agent")),
            _secs(phases.get("verifier")),
            _secs(r.duration_s),
        )
    return table


def _throttled(r: TrialRecord) -> str:
    """An imported trial has no kernel counters: "-", not a zero nobody measured."""
    if r.harbor is not None:
        return "-"
    return f"{r.evidence.cpu_throttled_s:.2f}s/{r.evidence.cpu_throttled_periods}"


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def results_json(records: Iterable[TrialRecord]) -> str:
    """A JSON array, one object per trial: the full record, evidence and telemetry included.
    Strict JSON, as analysis/jsonable.py: a NaN a record holds (a run stored before rewards were
    checked) is null, an infinity the string "inf", never a bare NaN token."""
    dumped = [to_jsonable(r.model_dump(mode="json")) for r in records]
    return json.dumps(dumped, indent=1, allow_nan=False)
