"""The storage ceiling of an `oci` trial, where the engine's own (`--storage-opt size`) is
refused: overlay caps a writable layer only over xfs mounted with pquota, which few hosts have.

The container's whole writable layer then lives on one ext4 image of exactly the ceiling,
loop-mounted on the host, as on the process backend (`disks.py`): the disk is mounted on the
engine's own folder of the container's layer (overlay's UpperDir and WorkDir, Docker's and
Podman's alike) between the container's creation and its start, holding a copy of what the
engine put there. The engine's overlay then takes its upper layer from the disk: every path the
container writes is capped, and a rename between two of them (from /app to /tmp, as
Terminal-Bench 2.0's `path-tracing-reverse` test does with `os.rename`) stays within one
filesystem, as on the engine's own cap. A write past the ceiling fails with ENOSPC inside the
container. The disk is read through a descriptor of its root, opened as it is mounted: Podman
unmounts the folder when the container stops, and the readings and /logs must outlive that.
Needs a local engine with the overlay driver, and root (mount).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from levelfield.errors import SandboxStartError
from levelfield.sandbox import disks, trees

UNMOUNT_WAIT_S = 10.0  # for the engine to unmount the container's root from the disk


@dataclass(frozen=True, slots=True)
class LayerDisk:
    """One loop-mounted ext4 of the ceiling's size under the container's writable layer."""

    layer: Path  # the engine's folder of the container's layer, where the disk is mounted
    image: Path
    fd: int  # the disk's root: valid whoever unmounts the folder

    def free_and_used(self) -> tuple[int, int] | None:
        with contextlib.suppress(OSError):
            st = os.fstatvfs(self.fd)
            return st.f_bavail * st.f_frsize, (st.f_blocks - st.f_bfree) * st.f_frsize
        return None

    def is_full(self, free_bytes: int) -> bool:
        return disks.is_full(self.fd, free_bytes)

    def inodes_out(self) -> str | None:
        return disks.inodes_out(self.fd)

    def open_written(self, path: PurePosixPath) -> int:
        """A folder of the container as written during the trial (its upper layer), by
        descriptor: what the image itself holds there is not the trial's."""
        return trees.open_dir(self.fd, PurePosixPath("diff") / path.relative_to("/"))

    def holds_the_layer(self, written: PurePosixPath) -> bool:
        """Whether `written`, a folder the harness made in the container, is on this disk: the
        container's overlay really took its upper layer from it."""
        try:
            os.close(self.open_written(written))
        except OSError:
            return False
        return True

    def describe(self) -> str:
        return (
            "storage ceiling: the container's writable layer on a loop-mounted ext4 of the "
            "ceiling's size (the engine refuses --storage-opt size here)"
        )


def is_possible(engine_url: str | None) -> bool:
    """A loop mount must be visible to the engine: a local engine, and root to mount."""
    return bool(engine_url and engine_url.startswith("unix://")) and os.geteuid() == 0


def layer_of(inspected: dict[str, Any]) -> Path | None:
    """The engine's folder of a container's writable layer: overlay's UpperDir and WorkDir
    must share it (the kernel wants them on one mount). None for another storage driver."""
    data = (inspected.get("GraphDriver") or {}).get("Data") or {}
    upper, work = data.get("UpperDir"), data.get("WorkDir")
    if not upper or not work or Path(upper).parent != Path(work).parent:
        return None
    layer = Path(upper).parent
    return layer if layer.is_dir() else None


def place(layer: Path, trial_dir: Path, size_bytes: int) -> LayerDisk:
    """Make the disk, copy the engine's layer folder onto it (links, modes, owners and
    extended attributes as they are), and mount it on that folder. Before the container
    starts: the engine mounts its overlay from the folder's paths at the start."""
    staging, image = trial_dir / "disk", trial_dir / "disk.img"
    staging.mkdir(parents=True, exist_ok=True)
    disks.mount_ext4(image, staging, size_bytes)
    try:
        _run(["cp", "-a", "--", f"{layer}/.", str(staging)])
        disks.unmount(staging, lazy=False)
        _run(["mount", "-o", "loop", str(image), str(layer)])
        fd = os.open(layer, os.O_RDONLY | os.O_DIRECTORY)
    except BaseException:
        disks.unmount(staging)
        image.unlink(missing_ok=True)
        raise
    finally:
        with contextlib.suppress(OSError):
            staging.rmdir()
    return LayerDisk(layer, image, fd)


def release(disk: LayerDisk) -> None:
    """Once the container is stopped: the engine unmounts its root from the disk (Podman the
    disk too), then the disk is unmounted, its descriptor closed and its image deleted, so
    that the engine removes the layer folder as it made it."""
    _wait_unmounted(disk.layer / "merged")
    disks.unmount(disk.layer)
    with contextlib.suppress(OSError):
        os.close(disk.fd)
    disk.image.unlink(missing_ok=True)


def remove_container(api: Any, container_id: str, disk: LayerDisk | None) -> None:
    """The container stopped, its disk released, then the container removed: the engine
    removes the layer folder only once the disk is off it."""
    if disk is not None:
        with contextlib.suppress(Exception):
            api.kill(container_id)
        release(disk)
    with contextlib.suppress(Exception):
        api.remove_container(container_id, force=True, v=True)


def release_left(trials: Path) -> int:
    """A dead run's disks (their images under `trials`: under its containers' layers, its
    graders'), once the containers are stopped, and the images of disks the engine unmounted
    itself; how many disks were mounted."""
    mounted = disks.mounted_images(trials)
    for point, image in mounted:
        _wait_unmounted(Path(point) / "merged")
        disks.unmount(Path(point))
        image.unlink(missing_ok=True)
    in_use = {image for _, image in disks.mounted_images(trials)}
    for image in trials.glob("*/*.img"):
        if image not in in_use:
            image.unlink(missing_ok=True)
    return len(mounted)


def _wait_unmounted(path: Path) -> None:
    deadline = time.monotonic() + UNMOUNT_WAIT_S
    while disks.is_mounted(path) and time.monotonic() < deadline:
        time.sleep(0.02)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SandboxStartError(f"{' '.join(argv[:2])} failed: {done.stderr.strip()[-300:]}")
