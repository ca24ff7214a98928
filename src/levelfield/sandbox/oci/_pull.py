"""Task → its pinned prebuilt image: task.toml's `docker_image`, pulled through the engine.

Terminal-Bench 2.0 pins a prebuilt image per task; building from the Dockerfile months later
installs other package versions, and scores built that way are not the leaderboard's. A pull
happens once per image name per backend (so once per invocation of a run), which also re-reads
the tag: a tag moved to another digest between two invocations of one sweep shows in the
records, and the report flags it. The digest recorded is the registry's (`name@sha256:...`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from levelfield.errors import SandboxStartError

PULL_TIMEOUT_S = 1800  # a multi-GB TB2 image on a slow link; an unreachable registry fails fast


class ImageMode(StrEnum):
    """Where a task's image comes from (`--image`)."""

    AUTO = "auto"  # the pinned prebuilt image when present or pullable, else a build
    PREBUILT = "prebuilt"  # task.toml's docker_image, pulled when absent; never a build
    BUILD = "build"  # environment/Dockerfile, as a task author would


@dataclass(frozen=True, slots=True)
class Prebuilt:
    """A prebuilt image the engine now holds, and how it got there."""

    name: str
    image_id: str
    digest: str | None  # the registry's digest; None for an image loaded by hand, never pushed
    pulled: bool  # False: the engine had it and the registry could not be asked
    note: str = ""


def repo_digest(found: dict[str, Any], name: str) -> str | None:
    """The digest the registry gave `name` (RepoDigests holds `repository@sha256:...`)."""
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    digests = found.get("RepoDigests") or []
    for entry in digests:
        repo, _, digest = entry.partition("@")
        if repo == repository or repo.endswith("/" + repository):
            return digest
    return digests[0].partition("@")[2] if digests else None


class PullCache:
    """One pull per image name per backend; later trials reuse its answer (or its error)."""

    def __init__(self) -> None:
        self._done: dict[str, Prebuilt | SandboxStartError] = {}
        self._lock = threading.Lock()

    def get(self, client: Any, name: str) -> Prebuilt:
        with self._lock:
            if name not in self._done:
                try:
                    self._done[name] = fetch(client, name)
                except SandboxStartError as exc:
                    self._done[name] = exc
            answer = self._done[name]
        if isinstance(answer, SandboxStartError):
            raise answer
        return answer


def fetch(client: Any, name: str) -> Prebuilt:
    """Pull `name` (re-reading its tag); use the engine's copy if the registry cannot answer."""
    error = _pull(client, name)
    found = inspect_image(client, name)
    if found is None:
        raise SandboxStartError(
            f"prebuilt image {name} could not be pulled and is not in the engine: {error}"
        )
    note = f"registry not reached ({error}): the engine's own copy" if error else ""
    return Prebuilt(name, found["Id"], repo_digest(found, name), error is None, note)


def _pull(client: Any, name: str) -> str | None:
    """None on success, else the engine's or the registry's reason, in one line."""
    repository, tag = _split(name)
    try:
        for chunk in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk or "errorDetail" in chunk:
                return str(chunk.get("error") or chunk.get("errorDetail")).strip()
    except Exception as exc:  # the engine refused, or the connection to it broke
        text = getattr(exc, "explanation", None) or str(exc)
        return f"{type(exc).__name__}: {text}".strip()
    return None


def _split(name: str) -> tuple[str, str]:
    """`host:5000/a/b:tag` → (`host:5000/a/b`, `tag`); no tag means `latest`."""
    last = name.rsplit("/", 1)[-1]
    if "@" in name:
        repository, _, digest = name.partition("@")
        return repository, digest
    if ":" in last:
        repository, _, tag = name.rpartition(":")
        return repository, tag
    return name, "latest"


def inspect_image(client: Any, name: str) -> dict[str, Any] | None:
    """The engine's record of an image, or None when it has none (404 on any engine)."""
    import docker.errors

    try:
        return client.api.inspect_image(name)  # type: ignore[no-any-return]
    except docker.errors.ImageNotFound:
        return None
    except docker.errors.APIError as exc:
        if getattr(exc, "status_code", None) == 404:
            return None
        raise
