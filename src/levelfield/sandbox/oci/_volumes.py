"""The storage ceiling of an `oci` trial, where the engine's own (`--storage-opt size`) is
refused: overlay2 caps a writable layer only over xfs mounted with pquota, which few hosts have.

The trial's writable paths (its WORKDIR, /tmp and /logs) then live on one ext4 image of exactly
the ceiling, loop-mounted on the host, as on the process backend (`disks.py`). Each path is
a named volume of the engine's `local` driver bound to a directory of that filesystem, so the
engine copies the image's own files at that path into it when the container is created (a plain
bind mount would hide them). A write past the ceiling fails with ENOSPC inside the container,
and the fill level is read from the host with statvfs. Needs a local engine and root (mount).
Other paths (/root, /usr) stay on the uncapped writable layer; the trial's notes say so.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from levelfield.errors import SandboxStartError
from levelfield.sandbox import disks

CAPPED_PATHS = (PurePosixPath("/tmp"), PurePosixPath("/logs"))  # plus the task's WORKDIR


@dataclass(frozen=True, slots=True)
class StorageVolume:
    """One loop-mounted ext4 of the ceiling's size, exposed as one engine volume per path."""

    root: Path  # the mount point on the host
    image: Path
    volumes: tuple[tuple[str, PurePosixPath], ...]  # (engine volume name, path in the container)

    def mounts(self) -> list[Any]:
        from docker.types import Mount

        return [Mount(str(path), name, type="volume") for name, path in self.volumes]

    def free_and_used(self) -> tuple[int, int] | None:
        with contextlib.suppress(OSError):
            st = os.statvfs(self.root)
            return st.f_bavail * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize
        return None

    def is_full(self, free_bytes: int) -> bool:
        return disks.is_full(self.root, free_bytes)

    def describe(self) -> str:
        paths = ", ".join(str(p) for _, p in self.volumes)
        return (
            f"storage ceiling: loop-mounted ext4 volume for {paths} (other paths uncapped: the "
            "engine refuses --storage-opt size here)"
        )


def is_possible(engine_url: str | None) -> bool:
    """A loop mount must be visible to the engine: a local engine, and root to mount."""
    return bool(engine_url and engine_url.startswith("unix://")) and os.geteuid() == 0


def create_volume(
    api: Any, trial_dir: Path, workdir: PurePosixPath, size_bytes: int, labels: dict[str, str]
) -> StorageVolume:
    """Make and mount the disk, one directory and engine volume per capped path."""
    root, image = trial_dir / "disk", trial_dir / "disk.img"
    root.mkdir(parents=True, exist_ok=True)
    disks.mount_ext4(image, root, size_bytes)
    volumes: list[tuple[str, PurePosixPath]] = []
    try:
        for path in dict.fromkeys((workdir, *CAPPED_PATHS)):
            directory = root / (path.name or "root")
            directory.mkdir(exist_ok=True)
            if path == PurePosixPath("/tmp"):
                directory.chmod(0o1777)
            name = f"{labels['levelfield.trial'][:40]}-{path.name or 'root'}-{os.urandom(3).hex()}"
            api.create_volume(
                name,
                driver="local",
                driver_opts={"type": "none", "o": "bind", "device": str(directory)},
                labels=labels,
            )
            volumes.append((name, path))
    except Exception as exc:
        remove_volume(api, StorageVolume(root, image, tuple(volumes)))
        raise SandboxStartError(f"storage volume for {trial_dir.name}: {exc}") from exc
    return StorageVolume(root, image, tuple(volumes))


def disk_of(volume: dict[str, Any]) -> Path | None:
    """The loop-mounted disk a volume of ours is bound into (its device's parent), from the
    engine's own listing: `reap` finds it whatever directory the dead trial used."""
    device = (volume.get("Options") or {}).get("device")
    return Path(device).parent if device else None


def release_disk(root: Path) -> int:
    """Unmount a trial's disk and delete its image; 1 if there was one to release."""
    if not disks.is_mounted(root):
        return 0
    disks.unmount(root)
    (root.parent / "disk.img").unlink(missing_ok=True)
    return 1


def remove_volume(api: Any, volume: StorageVolume) -> None:
    """After the container is gone: the engine's volumes, then the mount and the image."""
    for name, _ in volume.volumes:
        with contextlib.suppress(Exception):
            api.remove_volume(name, force=True)
    disks.unmount(volume.root)
    volume.image.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        volume.root.rmdir()
