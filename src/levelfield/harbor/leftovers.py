"""What a Harbor process killed mid-trial left in levelfield's sandboxes, removed by the next one.

Harbor stops each environment in a `finally`, which a Harbor killed by SIGKILL never reaches, and
`harbor jobs resume` deletes the unfinished trial's folder without knowing of cgroups, mounted
disks or containers. Every sandbox the environment starts belongs to the run `harbor-<pid>` of the
Harbor process that started it, so the first trial a Harbor process starts on a backend reaps the
runs whose process is gone (a reused pid only postpones that).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from levelfield.harbor.record import RECORD_DIR

RUN_PREFIX = "harbor-"
OWNER_FILE = "run_id"  # in <trial>/levelfield/: whose sandbox the mounted disk there is
_reaped: set[str] = set()  # backends this process has already swept
_lock = threading.Lock()


def run_id() -> str:
    return f"{RUN_PREFIX}{os.getpid()}"


def reap_dead_runs(backend: Any) -> int:
    """Once per process and backend: what runs of dead Harbor processes left; the count removed."""
    with _lock:
        if backend.name in _reaped:
            return 0
        _reaped.add(backend.name)
    if backend.name == "process":
        atexit.register(_remove_own_run, backend)
    dead = sorted(r for r in _run_ids(backend) if not _alive(r))
    removed = sum(int(backend.reap(r)) for r in dead)
    return removed + (_orphan_disks() if backend.name == "process" else 0)


def _remove_own_run(backend: Any) -> None:
    """At the Harbor process's exit, its run's cgroup, empty once every trial has stopped (a
    trial still running keeps it, and the next Harbor process reaps it)."""
    from levelfield.sandbox._cgroup import PREFIX

    for base in backend.cgroups.bases.values():
        with contextlib.suppress(OSError):
            (base / PREFIX / run_id()).rmdir()


def _orphan_disks() -> int:
    """The process backend's trial disks, mounted in Harbor's trial folders (`<trial>/levelfield
    /work`), which its own reap looks for under a levelfield run directory only."""
    from levelfield.sandbox._workspace import mounts_under, unmount

    removed = 0
    for point in mounts_under(Path("/")):
        if not point.endswith(f"/{RECORD_DIR}/work"):
            continue
        owner = Path(point).parent / OWNER_FILE
        try:
            run = owner.read_text().strip()
        except OSError:
            continue
        if run.startswith(RUN_PREFIX) and not _alive(run):
            unmount(Path(point))
            (Path(point).parent / "disk.img").unlink(missing_ok=True)
            removed += 1
    return removed


def _run_ids(backend: Any) -> set[str]:
    if backend.name == "process":
        from levelfield.sandbox._cgroup import PREFIX

        found = set()
        for base in backend.cgroups.bases.values():
            root = base / PREFIX
            if root.is_dir():
                found |= {p.name for p in root.iterdir() if p.name.startswith(RUN_PREFIX)}
        return found
    if backend.name == "oci":
        from levelfield.sandbox.oci import LABEL_RUN

        containers = backend.client.api.containers(all=True, filters={"label": LABEL_RUN})
        labels = (c.get("Labels") or {} for c in containers)
        return {run for lab in labels if (run := lab.get(LABEL_RUN, "")).startswith(RUN_PREFIX)}
    return set()


def _alive(run: str) -> bool:
    try:
        pid = int(run.removeprefix(RUN_PREFIX))
    except ValueError:
        return True  # not one of ours: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
