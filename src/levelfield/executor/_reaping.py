"""The run's own account of leftovers: whatever a reap removes (a killed harness's cgroups,
mounts and containers, or a lost Ray node's half-started attempt) is listed in the run's meta
under `reaped`, so that the record says a leak happened and when it was cleaned."""

from __future__ import annotations

from datetime import UTC, datetime

from levelfield.store import Store

META_KEY = "reaped"


def note_reaped(store: Store, *, host: str, count: int, when: str) -> None:
    """`when`: "start" (left by an earlier invocation) or "end" (left during this one)."""
    if count <= 0:
        return
    entries = list(store.meta().get(META_KEY, []))
    entries.append(
        {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "host": host,
            "count": count,
            "when": when,
        }
    )
    store.set_meta({META_KEY: entries})
