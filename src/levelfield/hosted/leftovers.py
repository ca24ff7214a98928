"""What a harness process killed mid-trial left in levelfield's sandboxes, removed by the next one.

Harbor and Inspect stop each sandbox in a `finally`, which a process killed by SIGKILL never
reaches, and neither knows of cgroups, mounted disks or containers (`harbor jobs resume` deletes
the unfinished trial's folder; an Inspect eval run again starts new samples). Every sandbox a
hosted harness starts belongs to the run `<prefix><pid>` of the process that started it
(`harbor-123`, `inspect-456`), so the first trial a process starts on a backend reaps the runs of
its harness whose process is gone (a reused pid only postpones that).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from pathlib import Path
from typing import Any

OWNER_FILE = "run_id"  # in a hosted trial's record folder: whose sandbox the mounted disk there is
DISK_DIR = "work"  # the process backend's trial disk, mounted in the record folder
_reaped: set[str] = set()  # (prefix, backend) pairs this process has already swept
_lock = threading.Lock()


def run_id(prefix: str) -> str:
    return f"{prefix}{os.getpid()}"


def reap_dead_runs(backend: Any, prefix: str) -> int:
    """Once per process, harness and backend: what runs of dead processes of that harness left;
    the count removed."""
    with _lock:
        if f"{prefix}{backend.name}" in _reaped:
            return 0
        _reaped.add(f"{prefix}{backend.name}")
    if backend.name == "process":
        atexit.register(_remove_own_run, backend, run_id(prefix))
    dead = sorted(r for r in _run_ids(backend, prefix) if not _alive(r, prefix))
    removed = sum(int(backend.reap(r)) for r in dead)
    return removed + (_orphan_disks(prefix) if backend.name == "process" else 0)


def _remove_own_run(backend: Any, own: str) -> None:
    """At the process's exit, its run's cgroup, empty once every trial has stopped (a trial
    still running keeps it, and the next process of the harness reaps it)."""
    from levelfield.sandbox.cgroups import PREFIX

    for base in backend.cgroups.bases.values():
        with contextlib.suppress(OSError):
            (base / PREFIX / own).rmdir()


def _orphan_disks(prefix: str) -> int:
    """The process backend's trial disks, mounted in the hosted trials' record folders
    (`<record folder>/work`), which its own reap looks for under a levelfield run directory
    only."""
    from levelfield.sandbox.disks import mounts_under, unmount

    removed = 0
    for point in mounts_under(Path("/")):
        if not point.endswith(f"/{DISK_DIR}"):
            continue
        owner = Path(point).parent / OWNER_FILE
        try:
            run = owner.read_text().strip()
        except OSError:
            continue
        if run.startswith(prefix) and not _alive(run, prefix):
            unmount(Path(point))
            (Path(point).parent / "disk.img").unlink(missing_ok=True)
            removed += 1
    return removed


def _run_ids(backend: Any, prefix: str) -> set[str]:
    if backend.name == "process":
        from levelfield.sandbox.cgroups import PREFIX

        found = set()
        for base in backend.cgroups.bases.values():
            root = base / PREFIX
            if root.is_dir():
                found |= {p.name for p in root.iterdir() if p.name.startswith(prefix)}
        return found
    if backend.name == "oci":
        from levelfield.sandbox.oci import LABEL_RUN

        containers = backend.client.api.containers(all=True, filters={"label": LABEL_RUN})
        labels = (c.get("Labels") or {} for c in containers)
        return {run for lab in labels if (run := lab.get(LABEL_RUN, "")).startswith(prefix)}
    return set()


def _alive(run: str, prefix: str) -> bool:
    try:
        pid = int(run.removeprefix(prefix))
    except ValueError:
        return True  # not one of ours: leave it
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
