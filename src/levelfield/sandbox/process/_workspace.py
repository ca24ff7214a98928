"""The process backend's writable disk for a trial: one filesystem holding /app, /logs, /tmp,
/var/tmp, /solution and $HOME (/tests is the grader's alone, on a disk of its own: `grader.py`).

With a storage ceiling it is an ext4 image of exactly that size, loop-mounted (`disks.py`): writes
past it fail with ENOSPC inside the sandbox, the host's disk is untouched, and the fill level is
read from the host with statvfs. Uncapped storage is a plain directory.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from levelfield.errors import SandboxStartError
from levelfield.sandbox import _walk, disks

# Sandbox path → directory under the workspace. The workdir (usually /app) is added per task.
LAYOUT = {
    PurePosixPath("/logs"): "logs",
    PurePosixPath("/solution"): "solution",
    PurePosixPath("/tmp"): "tmp",
    PurePosixPath("/root"): "home",
    PurePosixPath("/var/tmp"): "vartmp",  # the sandbox's own, as a container's is, not the host's
}
LOG_SUBDIRS = ("agent", "verifier", "artifacts")

@dataclass(frozen=True, slots=True)
class Workspace:
    root: Path
    image: Path | None  # the ext4 image when storage is capped
    binds: dict[PurePosixPath, Path]

    def host_path(self, sandbox_path: PurePosixPath) -> Path:
        """Where a sandbox path lives on the host; only the workspace's own paths map. The path
        below the bind is the sandbox's to shape (a link, a FIFO): walk it with `trees`."""
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
        return disks.is_full(self.root, free_bytes)

    def inodes_out(self) -> str | None:
        return disks.inodes_out(self.root)


def create_workspace(
    trial_dir: Path, workdir: PurePosixPath, storage_bytes: int | None
) -> Workspace:
    root = trial_dir / "work"
    root.mkdir(parents=True, exist_ok=True)
    image = None
    if storage_bytes is not None:
        image = trial_dir / "disk.img"
        disks.mount_ext4(image, root, storage_bytes)
    binds = {target: root / name for target, name in LAYOUT.items()}
    binds[workdir] = root / "app"
    for path in binds.values():
        path.mkdir(exist_ok=True)
    for sub in LOG_SUBDIRS:
        (root / "logs" / sub).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    (root / "vartmp").chmod(0o1777)
    return Workspace(root, image, binds)


def destroy_workspace(workspace: Workspace) -> None:
    if workspace.image is not None:
        disks.unmount(workspace.root)
        workspace.image.unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # iterative: it holds the agent's deepest folders
        _walk.remove_path(workspace.root)


