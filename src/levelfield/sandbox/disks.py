"""Disks the harness makes for a trial: a sparse ext4 image of a given size, loop-mounted (a
storage ceiling the kernel enforces, a grader's own filesystem), their mounts found and released,
and the readings of how full a disk is or was.

A tmpfs would do the same but charge every written byte to the trial's memory cgroup, turning a
disk-hungry task into an OOM kill. Used by both backends, the grader, and whatever reaps a dead
run's leftovers.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from levelfield.errors import SandboxStartError

# A writer with big buffers stops short of the last block it could not fill whole (dd bs=1M
# leaves up to 1 MiB), so "full" is free space under 1 MiB or 1 % of the disk.
FULL_BELOW_BYTES = 1 << 20
FULL_BELOW_FRACTION = 0.01
FULL_BELOW_INODES = 16
# The host's filesystem is "full" for a trial's uncapped writes below the smaller of these: on a
# big disk, package installs and builds write in tens of MiB, so less than 64 MiB free fails them
# as surely as none does; a small disk (a 48 MiB run directory) is not full at 39 MiB free.
HOST_FULL_BELOW_BYTES = 64 << 20
HOST_FULL_BELOW_FRACTION = 0.05


def is_full(root: Path | int, free_bytes: int) -> bool:
    """Whether a capped disk mounted at `root` (or a descriptor of it) is full with
    `free_bytes` left, or with next to no inodes left: the ceiling is a number of bytes, but
    the ext4 that enforces it refuses a new file once its inodes are gone, and that refusal
    is the ceiling's, not the agent's failing its task."""
    try:
        st = os.statvfs(root)
    except OSError:
        return False
    capacity = st.f_blocks * st.f_frsize
    return free_bytes < max(FULL_BELOW_BYTES, FULL_BELOW_FRACTION * capacity) or _no_inodes(st)


def inodes_out(root: Path | int) -> str | None:
    """The evidence's note when the disk at `root` ran out of inodes rather than bytes."""
    try:
        st = os.statvfs(root)
    except OSError:
        return None
    if not _no_inodes(st):
        return None
    return (
        f"storage ceiling: its disk ran out of inodes ({st.f_files - st.f_ffree} of "
        f"{st.f_files} used) before bytes: a new file there fails with ENOSPC"
    )


def _no_inodes(st: os.statvfs_result) -> bool:
    return st.f_files > 0 and st.f_favail < max(FULL_BELOW_INODES, FULL_BELOW_FRACTION * st.f_files)


def written_bytes(image: Path) -> int | None:
    """What the trial's disk image ever held: the sparse file's allocation on the host. Freed
    blocks are never given back (the image is made with nodiscard and mounted without discard),
    so this bounds the disk's peak use from above: a disk that filled and emptied between two
    samples still shows here. Near a full disk ext4 writes its data out at once to find room,
    so the blocks of a write that hit ENOSPC reach the image even when deleted right after."""
    try:
        return image.stat().st_blocks * 512
    except OSError:
        return None


@dataclass
class HostDiskWatch:
    """The least free space seen on the host filesystem that takes a trial's uncapped writes
    (the process workspace without a ceiling, an oci container's writable layer): when it ran
    out, the host's or the engine's disk is to blame, not a ceiling of the trial's."""

    path: Path | None
    least_free_bytes: int | None = None
    capacity_bytes: int | None = None

    def read(self) -> None:
        if self.path is None:
            return
        try:
            st = os.statvfs(self.path)
        except OSError:
            return
        free = st.f_bfree * st.f_frsize  # the trial writes as root: reserved blocks count
        least = self.least_free_bytes
        self.least_free_bytes = free if least is None else min(least, free)
        self.capacity_bytes = st.f_blocks * st.f_frsize

    @property
    def full(self) -> bool:
        least, capacity = self.least_free_bytes, self.capacity_bytes
        if least is None or capacity is None:
            return False
        return least < min(HOST_FULL_BELOW_BYTES, HOST_FULL_BELOW_FRACTION * capacity)


def mount_ext4(image: Path, mountpoint: Path, size_bytes: int) -> None:
    """A sparse image: creating even a 10 GiB filesystem costs ~10 ms and no real disk."""
    with open(image, "wb") as fh:
        fh.truncate(size_bytes)
    steps = [
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            "-O",
            "^has_journal",
            "-E",
            "lazy_itable_init=1,nodiscard",
            str(image),
        ],
        ["mount", "-o", "loop", str(image), str(mountpoint)],
    ]
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise SandboxStartError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()}")


def unmount(path: Path, *, lazy: bool = True) -> None:
    """Lazy by default: a process still holding a file must not keep the trial's disk alive.
    Not lazy where the disk is mounted again right after (two mounts of one ext4 corrupt it)."""
    if is_mounted(path):
        subprocess.run(["umount", *(["-l"] if lazy else []), str(path)], capture_output=True)


def is_mounted(path: Path) -> bool:
    return str(path) in mounts_under(path)


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below `prefix`, deepest first (octal escapes decoded)."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            point = line.split()[1].replace("\\040", " ")
            if point == str(prefix) or point.startswith(str(prefix).rstrip("/") + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def mounted_images(prefix: Path) -> list[tuple[str, Path]]:
    """(mount point, image) of the loop-mounted disks whose image lies under `prefix`, wherever
    they are mounted (an oci trial's disk sits on the engine's own folder of its layer)."""
    found: list[tuple[str, Path]] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            source, point = line.split()[:2]
            if not source.startswith("/dev/loop"):
                continue
            backing = Path("/sys/block", Path(source).name, "loop", "backing_file")
            with contextlib.suppress(OSError):
                image = Path(backing.read_text().strip())
                if image.is_relative_to(prefix):
                    found.append((point.replace("\\040", " "), image))
    return found
