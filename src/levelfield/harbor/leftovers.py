"""What a Harbor process killed mid-trial left, removed by the next one (`hosted/leftovers.py`):
every sandbox levelfield's Harbor environment starts belongs to the run `harbor-<pid>`."""

from __future__ import annotations

from typing import Any

from levelfield.hosted import leftovers
from levelfield.hosted.leftovers import OWNER_FILE

RUN_PREFIX = "harbor-"

__all__ = ["OWNER_FILE", "RUN_PREFIX", "reap_dead_runs", "run_id"]


def run_id() -> str:
    return leftovers.run_id(RUN_PREFIX)


def reap_dead_runs(backend: Any) -> int:
    return leftovers.reap_dead_runs(backend, RUN_PREFIX)
