"""Task → image: build `environment/` once per content, or take the pinned prebuilt image
(`_pull.py`), through the Docker Engine API.

The tag is a hash of the build context (every file's path, mode and bytes) and of the local image
IDs its FROM lines name, so an edited Dockerfile or a rebuilt stand-in base gives a new image,
and an unchanged task reuses its image across trials and runs. Build logs go to the run's
`images/` directory, one per tag; a failed or timed-out build raises `SandboxStartError` with
the log's tail. A lock file per tag keeps two trials of one task from building it twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levelfield.errors import SandboxStartError
from levelfield.records import ImageRecord
from levelfield.sandbox import _output
from levelfield.sandbox.oci._pull import ImageMode, PullCache, inspect_image
from levelfield.tasks import Task

IMAGE_REPOSITORY = "levelfield"  # tags read levelfield/<task>:<context hash>
LABEL_CONTEXT = "levelfield.context"
LABEL_STAND_IN = "levelfield.stand-in"  # set by _offline.py on the bases it builds
LOG_TAIL_BYTES = 3000
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class BuiltImage:
    """The image a trial runs, and how it came to be (recorded with the trial)."""

    tag: str
    image_id: str
    cached: bool
    log_path: Path | None
    stand_in: str | None  # the offline base it was built on, when it was
    source: str = "built"  # built | pulled | present (a prebuilt image the engine already had)
    digest: str | None = None  # the registry's digest of a prebuilt image; else the image ID
    note: str = ""  # why auto built instead of pulling, or why the registry was not asked

    def describe(self) -> str:
        how = "cached" if self.cached and self.source == "built" else self.source
        base = f", stand-in base {self.stand_in}" if self.stand_in else ""
        pinned = f", digest {self.digest}" if self.digest else ""
        note = f"; {self.note}" if self.note else ""
        return f"image {self.tag} ({how}{base}{pinned}){note}"

    def record(self) -> ImageRecord:
        return ImageRecord(
            name=self.tag,
            digest=self.digest or self.image_id,
            source=self.source,
            stand_in=self.stand_in,
        )


def from_images(dockerfile: Path) -> list[str]:
    """Base images the Dockerfile's FROM lines name (build stages referring back are kept)."""
    return _FROM.findall(dockerfile.read_text(errors="replace"))


def context_hash(context: Path, base_ids: list[str]) -> str:
    """sha256 over the context's files (path, mode, bytes) and the bases' image IDs."""
    digest = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(context).as_posix()
        digest.update(f"{rel}\0{path.lstat().st_mode:o}\0".encode())
        digest.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        digest.update(b"\0")
    for base_id in base_ids:
        digest.update(f"base\0{base_id}\0".encode())
    return digest.hexdigest()


def image_tag(task: Task, digest: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", task.name.lower()).strip("-.") or "task"
    return f"{IMAGE_REPOSITORY}/{name}:{digest[:16]}"


def ensure_image(
    client: Any,
    task: Task,
    *,
    images_dir: Path,
    mode: ImageMode = ImageMode.BUILD,
    pulls: PullCache | None = None,
    network: str | None = None,
) -> BuiltImage:
    """The task's image, from where `mode` says (`_pull.ImageMode`).

    `client` is a `docker.DockerClient`. `auto` takes the pinned `docker_image` when the engine
    has it or can pull it, and builds from environment/ otherwise (the trial's note says why);
    a task without a Dockerfile can only run its prebuilt image.
    """
    dockerfile = task.environment_dir / "Dockerfile"
    pulls = pulls or PullCache()
    if mode is ImageMode.BUILD and dockerfile.is_file():
        return _built(client, task, images_dir, network)
    if not task.docker_image:
        if dockerfile.is_file():
            return _built(client, task, images_dir, network)
        raise SandboxStartError(f"{task.name}: no environment/Dockerfile and no docker_image")
    if mode is ImageMode.BUILD:
        raise SandboxStartError(f"{task.name}: --image build, but no environment/Dockerfile")
    try:
        prebuilt = pulls.get(client, task.docker_image)
    except SandboxStartError as exc:
        if mode is ImageMode.PREBUILT or not dockerfile.is_file():
            raise
        built = _built(client, task, images_dir, network)
        return dataclasses.replace(built, note=f"built: {exc}")
    found = inspect_image(client, prebuilt.image_id) or {}
    labels = (found.get("Config") or {}).get("Labels") or {}
    return BuiltImage(
        prebuilt.name,
        prebuilt.image_id,
        True,
        None,
        labels.get(LABEL_STAND_IN),
        source="pulled" if prebuilt.pulled else "present",
        digest=prebuilt.digest,
        note=prebuilt.note,
    )


def _built(client: Any, task: Task, images_dir: Path, network: str | None) -> BuiltImage:
    """Built from environment/, cached by content: an unchanged task reuses its image."""
    dockerfile = task.environment_dir / "Dockerfile"
    bases = [_local_id(client, name) for name in from_images(dockerfile)]
    tag = image_tag(task, context_hash(task.environment_dir, [b for b in bases if b]))
    images_dir.mkdir(parents=True, exist_ok=True)
    log_path = images_dir / f"{tag.replace('/', '_').replace(':', '_')}.log"
    with _build_lock(log_path.with_suffix(".lock")):
        found = inspect_image(client, tag)
        cached = found is not None
        if found is None:
            _build(client, task, tag, log_path, network)
            found = inspect_image(client, tag)
            if found is None:
                raise SandboxStartError(f"build of {tag} reported success but left no image")
    labels = (found.get("Config") or {}).get("Labels") or {}
    return BuiltImage(tag, found["Id"], cached, log_path, labels.get(LABEL_STAND_IN))


def _local_id(client: Any, name: str) -> str | None:
    found = inspect_image(client, name)
    return found["Id"] if found else None


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(client: Any, task: Task, tag: str, log_path: Path, network: str | None) -> None:
    """Stream the build log to `log_path`; give up at the task's build timeout.

    `pull=False`: the FROM images must be local (stand-in bases, or loaded by hand); podman's
    compat endpoint would otherwise try a registry that is not reachable and hang on DNS.
    """
    stream = client.api.build(
        path=str(task.environment_dir),
        tag=tag,
        rm=True,
        forcerm=True,
        pull=False,
        network_mode=network,  # the host's, on an engine without a bridge network
        decode=False,  # decoded below: the raw generator holds the response `_close_stream` needs
        labels={LABEL_CONTEXT: tag.split(":")[-1]},
    )
    outcome: dict[str, str] = {}
    with open(log_path, "w") as log:
        log.write(f"# levelfield build of {task.name} from {task.environment_dir} as {tag}\n")
        log.flush()
        reader = threading.Thread(target=_drain, args=(stream, log, outcome), daemon=True)
        started = time.monotonic()
        reader.start()
        reader.join(task.build_timeout_s)
        if reader.is_alive():
            _close_stream(stream)
            raise SandboxStartError(
                f"build of {task.name} exceeded its build timeout of {task.build_timeout_s:g} s; "
                f"log {log_path}:\n{_output.tail(log_path, max_bytes=LOG_TAIL_BYTES)}"
            )
        log.write(f"# finished in {time.monotonic() - started:.1f} s\n")
    if "error" in outcome:
        raise SandboxStartError(
            f"build of {task.name} failed: {outcome['error']}; log {log_path}:\n"
            + _output.tail(log_path, max_bytes=LOG_TAIL_BYTES)
        )


def _drain(stream: Any, log: Any, outcome: dict[str, str]) -> None:
    from docker.utils.json_stream import json_stream

    try:
        for chunk in json_stream(stream):
            text = chunk.get("stream") or chunk.get("status") or ""
            if "error" in chunk or "errorDetail" in chunk:
                outcome["error"] = str(chunk.get("error") or chunk.get("errorDetail"))
                text = f"ERROR: {outcome['error']}\n"
            log.write(text)
            log.flush()
    except Exception as exc:  # the engine dropped the connection mid-build
        outcome["error"] = f"{type(exc).__name__}: {exc}"
        log.write(f"ERROR: {outcome['error']}\n")


def _close_stream(stream: Any) -> None:
    """Dropping the build's connection is how the Engine API cancels a build (Docker honours it;
    podman 4.3 may finish the build in the background). The streaming generator holds the HTTP
    response; shutting its socket down unblocks the reader thread too."""
    frame = getattr(stream, "gi_frame", None)
    response = frame.f_locals.get("response") if frame is not None else None
    if response is not None:
        with contextlib.suppress(Exception):  # best effort: the trial fails with the timeout
            response.close()
