"""Which container engine answers on the Docker Engine API, and what it offers a trial.

Docker and Podman both serve the API; they differ in what a trial can rely on. Docker started
without iptables (`scripts/docker_setup.sh`) has no `bridge` network, so builds share the host's
network there; Podman's compat API accepts `bridge` and maps it to its own network. A trial's
container never uses the engine's networks: it starts with `none`, and levelfield attaches its
own sealed link when the task has network (`_netns.py`), the same on every engine. Everything
here answers questions about the engine and never raises for an engine that is absent: the
report says why.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Where Docker and `podman system service` put their API socket (rootful, then rootless podman),
# then the one `scripts/docker_setup.sh` starts beside podman.
SOCKET_PATHS = ("/var/run/docker.sock", "/run/podman/podman.sock", "/run/levelfield-docker.sock")


@dataclass(frozen=True, slots=True)
class EngineReport:
    """For `levelfield doctor` and the trial's evidence: which engine answers, and how."""

    found: bool
    url: str | None
    engine: str | None = None  # "podman" or "docker"
    version: str | None = None
    api_version: str | None = None
    cgroup_version: str | None = None
    cgroup_driver: str | None = None
    runtime: str | None = None
    storage_driver: str | None = None
    cpus: int | None = None  # what the engine counts; Docker refuses NanoCpus above it
    has_bridge: bool = True  # False: Docker without iptables, builds share the host's network
    problems: tuple[str, ...] = ()

    def describe(self) -> str:
        if not self.found:
            return f"no container engine: {'; '.join(self.problems)}"
        network = "" if self.has_bridge else ", no bridge network (builds use the host's)"
        return (
            f"{self.engine} {self.version} (API {self.api_version}) at {self.url}, "
            f"cgroup v{self.cgroup_version} ({self.cgroup_driver}), runtime {self.runtime}, "
            f"storage {self.storage_driver}{network}"
        )

    @property
    def build_network(self) -> str | None:
        """Network for RUN steps: the engine's default, or the host's when it has no bridge."""
        return None if self.has_bridge else "host"


def find_engine_url() -> str | None:
    """DOCKER_HOST if set, else the first API socket that exists."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    for path in SOCKET_PATHS:
        if Path(path).is_socket():
            return f"unix://{path}"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and (Path(runtime_dir) / "podman" / "podman.sock").is_socket():
        return f"unix://{runtime_dir}/podman/podman.sock"
    return None


def other_engine_urls(used: str | None) -> list[str]:
    """The known sockets that exist here besides the one in use (for `levelfield doctor`)."""
    return [
        f"unix://{path}"
        for path in SOCKET_PATHS
        if Path(path).is_socket() and f"unix://{path}" != used
    ]


def engine_report(base_url: str | None = None) -> EngineReport:
    """Ping the engine and read its version, cgroup mode and networks; never raises."""
    url = base_url or find_engine_url()
    if url is None:
        tried = ", ".join(SOCKET_PATHS)
        return EngineReport(False, None, problems=(f"DOCKER_HOST unset and no socket at {tried}",))
    try:
        import docker
    except ImportError:
        return EngineReport(False, url, problems=("the docker SDK is missing: pip install docker",))
    try:
        client = docker.DockerClient(base_url=url, timeout=10)
        version, info = client.version(), client.info()
        is_podman = _is_podman(version)
        has_bridge = is_podman or bool(client.api.networks(names=["bridge"]))
    except Exception as exc:  # any failure to reach it is the report's content
        return EngineReport(False, url, problems=(f"engine at {url} did not answer: {exc}",))
    finally:
        if "client" in locals():
            client.close()
    return EngineReport(
        True,
        url,
        engine="podman" if is_podman else "docker",
        version=version.get("Version"),
        api_version=version.get("ApiVersion"),
        cgroup_version=str(info.get("CgroupVersion") or "?"),
        cgroup_driver=info.get("CgroupDriver"),
        runtime=info.get("DefaultRuntime"),
        storage_driver=info.get("Driver"),
        cpus=int(info["NCPU"]) if info.get("NCPU") else None,
        has_bridge=has_bridge,
    )


def _is_podman(version: dict[str, Any]) -> bool:
    components = {c.get("Name", "").lower() for c in version.get("Components") or []}
    return any("podman" in name for name in components)


OOM_EVENT_WAIT_S = 1.0  # the engine learns of a kill from the kernel asynchronously


def engine_saw_oom(
    api: Any, container_id: str, since_s: float, state: dict[str, Any], *, wait: bool
) -> bool:
    """The engine's own word on an OOM kill: its OOMKilled flag, or an `oom` event.

    Docker sets OOMKilled only when the container's init dies, but emits an `oom` event for any
    process the kernel killed in the container (an exec'd agent included); Podman on cgroup v1
    does neither. Asked in every trial, since a remote engine's or a containerised harness's
    only evidence may be this; the events up to now cost one quick call, and the wait for a late
    event is paid only with `wait` (a kill is expected: a counter saw one, or a phase died by
    SIGKILL where no counter can be read).
    """
    if state.get("OOMKilled"):
        return True
    try:
        events = api.events(
            since=f"{since_s:.9f}",
            until=f"{time.time() + (OOM_EVENT_WAIT_S if wait else 0.0):.9f}",
            filters={"container": container_id, "event": "oom"},
            decode=True,
        )
        return any((e.get("status") or e.get("Action")) == "oom" for e in events)
    except Exception:  # an engine without the events endpoint has no word to give
        return False
