"""The trial's writable disk: one filesystem holding /app, /logs, /tmp, /var/tmp, /solution and
$HOME. (/tests is the grader's alone, on a disk of its own: `grader.py`.)

With a storage ceiling it is an ext4 image of exactly that size, loop-mounted: writes past it
fail with ENOSPC inside the sandbox, the host's disk is untouched, and the fill level is read from
the host with statvfs. A tmpfs would do the same but charge every written byte to the trial's
memory cgroup, turning a disk-hungry task into an OOM kill. Uncapped storage is a plain directory.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from levelfield.errors import SandboxStartError
from levelfield.sandbox import _walk

# Sandbox path → directory under the workspace. The workdir (usually /app) is added per task.
LAYOUT = {
    PurePosixPath("/logs"): "logs",
    PurePosixPath("/solution"): "solution",
    PurePosixPath("/tmp"): "tmp",
    PurePosixPath("/root"): "home",
    PurePosixPath("/var/tmp"): "vartmp",  # the sandbox's own, as a container's is, not the host's
}
LOG_SUBDIRS = ("agent", "verifier", "artifacts")
# A writer with big buffers stops short of the last block it could not fill whole (dd bs=1M
# leaves up to 1 MiB), so "full" is free space under 1 MiB or 1 % of the disk.
FULL_BELOW_BYTES = 1 << 20
FULL_BELOW_FRACTION = 0.01
# The host's filesystem is "full" for a trial's uncapped writes below the smaller of these: on a
# big disk, package installs and builds write in tens of MiB, so less than 64 MiB free fails them
# as surely as none does; a small disk (a 48 MiB run directory) is not full at 39 MiB free.
HOST_FULL_BELOW_BYTES = 64 << 20
HOST_FULL_BELOW_FRACTION = 0.05


@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path
    image: Path | None  # the ext4 image when storage is capped
    binds: dict[PurePosixPath, Path]

    def host_path(self, sandbox_path: PurePosixPath) -> Path:
        """Where a sandbox path lives on the host; only the workspace's own paths map. The path
        below the bind is the sandbox's to shape (a link, a FIFO): walk it with `_tree`."""
        source, below = self.split(sandbox_path)
        return source / below

    def split(self, sandbox_path: PurePosixPath) -> tuple[Path, PurePosixPath]:
        """The bind's host directory (the harness's own) and the path below it (the sandbox's)."""
        for target in sorted(self.binds, key=lambda p: -len(p.parts)):
            if sandbox_path == target or target in sandbox_path.parents:
                return self.binds[target], PurePosixPath(sandbox_path.relative_to(target))
        raise SandboxStartError(f"{sandbox_path} is not writable in the sandbox")

    def free_and_used(self) -> tuple[int, int] | None:
        if self.image is None:
            return None
        try:
            st = os.statvfs(self.root)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize

    def is_full(self, free_bytes: int) -> bool:
        try:
            st = os.statvfs(self.root)
        except OSError:
            return False
        capacity = st.f_blocks * st.f_frsize
        return free_bytes < max(FULL_BELOW_BYTES, FULL_BELOW_FRACTION * capacity)


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


def create_workspace(
    trial_dir: Path, workdir: PurePosixPath, storage_bytes: int | None
) -> Workspace:
    root = trial_dir / "work"
    root.mkdir(parents=True, exist_ok=True)
    image = None
    if storage_bytes is not None:
        image = trial_dir / "disk.img"
        mount_ext4(image, root, storage_bytes)
    binds = {target: root / name for target, name in LAYOUT.items()}
    binds[workdir] = root / "app"
    for path in binds.values():
        path.mkdir(exist_ok=True)
    for sub in LOG_SUBDIRS:
        (root / "logs" / sub).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "vartmp").chmod(0o1777)
    return Workspace(root, image, binds)


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


def destroy_workspace(workspace: Workspace) -> None:
    if workspace.image is not None:
        unmount(workspace.root)
        workspace.image.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # iterative: it holds the agent's deepest folders
        _walk.remove_path(workspace.root)


def unmount(path: Path) -> None:
    """Lazy unmount: a process still holding a file must not keep the trial's disk alive."""
    if is_mounted(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


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
