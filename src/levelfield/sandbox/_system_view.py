"""The host's system directories as a sandbox binds them: each one's own filesystem, without the
mounts below it.

bubblewrap's `--ro-bind /var /var` is recursive: it copies every mount under /var (the overlay
of each running container, with the binds of its /etc/hostname; another trial's storage volume
under /srv) and then remounts each one read-only. A container that starts or stops in between
fails the sandbox's start ("Can't bind mount /oldroot/var ... Unable to apply mount flags"):
a trial of this run booked as an infrastructure error because of another. And what was copied
would have shown the agent other trials' filesystems.

So each directory is first bound once, not recursively, at a place of the harness's own and made
private, so that no mount made later under the original reaches it; sandboxes bind that. Mount
points below show as the empty directories they are on the host's disk. Where the view cannot be
made (no right to mount), the directory itself is bound, as before.
"""

from __future__ import annotations

import fcntl
import functools
import subprocess
from pathlib import Path

VIEW_ROOT = Path("/run/levelfield/system-view")


@functools.cache
def view_of(directory: str) -> str:
    """Where a sandbox binds `directory` from: its private, non-recursive view, made once per
    host (under a lock, since runs beside each other make it too) and reused after."""
    target = VIEW_ROOT / directory.strip("/")
    try:
        VIEW_ROOT.mkdir(parents=True, exist_ok=True)
        with open(VIEW_ROOT.parent / "system-view.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _mounted(target):
                target.mkdir(parents=True, exist_ok=True)
                _mount("--bind", directory, str(target))
                _mount("--make-private", str(target))
    except (OSError, subprocess.CalledProcessError):
        return directory
    return str(target)


def submounts(path: str) -> list[str]:
    """The mount points strictly below `path` (none, for a view)."""
    below = path.rstrip("/") + "/"
    return [point for point in _mount_points() if point.startswith(below)]


def _mounted(target: Path) -> bool:
    return str(target) in _mount_points()


def _mount_points() -> list[str]:
    """Mount points as the kernel lists them (octal escapes, as in a name with a space, kept)."""
    with open("/proc/self/mountinfo") as mountinfo:
        return [line.split()[4] for line in mountinfo if len(line.split()) > 4]


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)
