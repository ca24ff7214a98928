"""Sandboxes: where a trial runs under its limits. One backend per module, chosen by name.

Backends satisfy the `Backend` protocol without inheriting from anything; the registry maps a
name to a module so that an SDK (docker, ray) loads only when its backend is used.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import ClassVar, Protocol, runtime_checkable

from levelfield.errors import RunConfigError
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.records import Evidence, ImageRecord, PhaseResult
from levelfield.sandbox import trees
from levelfield.sandbox.cgroups import HeldTally
from levelfield.sandbox.trees import Entry
from levelfield.tasks import Task

# What a default Docker container holds (moby's oci/caps/defaults.go), the set doctor names a
# shell's rights against.
DOCKER_DEFAULT_CAPABILITIES = (
    "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap",
)  # fmt: skip
# What any phase of any backend holds: Docker's default less net_raw. A raw socket in the network
# namespace the grader shares lets a process the agent left running answer the grader's DNS
# queries and serve its downloads (a forged package index); no task asks for it. The process
# backend also leaves out mknod, which only Docker's device cgroup makes harmless; doctor shows
# what an agent's shell really holds on each.
DEFAULT_CAPABILITIES = tuple(cap for cap in DOCKER_DEFAULT_CAPABILITIES if cap != "net_raw")
CAPABILITIES_DESCRIBED = (
    "Docker's default set less net_raw (the process backend also less mknod)"
)  # the disclosure card's words for DEFAULT_CAPABILITIES


@dataclass(frozen=True, slots=True)
class Enforcement:
    """Which floors and ceilings are real on this backend and host, and by what mechanism."""

    memory_ceiling: str
    memory_floor: str
    cpu_ceiling: str
    cpu_floor: str
    pids_ceiling: str
    storage_ceiling: str
    isolation: str

    def describe(self) -> str:
        return "; ".join(
            f"{f.name.replace('_', ' ')}: {getattr(self, f.name)}" for f in fields(self)
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """A point-in-time reading for the telemetry sampler."""

    memory_bytes: int
    cpu_usage_s: float
    storage_used_bytes: int | None = None
    storage_free_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Observables:
    """Where telemetry reads what the trial alone did: a pid inside its network namespace
    (/proc/PID/net/dev) and its cgroup v2 directory (cpu/memory/io.pressure); None = not here."""

    network_pid: int | None = None
    pressure_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class ReadOnlyMount:
    """A host directory bound read-only into the sandbox (a CLI agent prepared on the host)."""

    source: Path
    target: PurePosixPath


@dataclass
class GraderView:
    """What a backend lends the grader: how to build its root from the agent's work state, the
    sandbox's network namespace and cgroup, and the environment a fresh process there starts
    with. Made when grading begins, after the agent's phase."""

    root: list[str]  # bubblewrap arguments that build the root, without the grader's own paths
    network: Path  # /proc/PID/ns/net of the sandbox
    processes: Path | None  # /proc/PID/ns/pid of the sandbox: whose processes are the agent's
    cgroup_procs: Sequence[Path]  # the trial cgroup's procs files (one per v1 hierarchy)
    env: dict[str, str]  # the image's (or the host userland's) base environment
    workdir: PurePosixPath
    hostname: str = "sandbox"
    capabilities: Sequence[str] = DEFAULT_CAPABILITIES
    fds: list[int] = field(default_factory=list)  # bound by descriptor; closed with the view
    leftovers: tuple[str, ...] = ()  # what the agent left running when grading began
    notes: tuple[str, ...] = ()  # what the backend reset, or could not
    held: HeldTally | None = None  # the trial cgroup's tally of what befell the held processes
    # The shell's start-up files of the image's HOME, as the image had them (never the agent's):
    # a test that starts a login shell (tmux, expect) reads them in the grader's HOME.
    home_files: Mapping[str, bytes] = field(default_factory=dict)
    writable_root: bool = False  # the agent's root was writable (a container): so is the grader's
    prelude: str = ""  # run in the grader's shell before test.sh (oci: the uv shim's links)
    # After the grader failed to start: which of its binds into the agent's folders the agent has
    # since put a link on the way of (its doing, not the harness's).
    linked: Callable[[], list[str]] = lambda: []
    # oci: the container's root, the names at its top guarded while the grader runs, and of them
    # the folders it mounts on (`_top_watch`); what the agent put there that it cannot start over.
    top: tuple[Path, frozenset[str], frozenset[str]] | None = None
    refused: tuple[str, ...] = ()

    def close(self) -> None:
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds.clear()


# What a login or interactive shell reads from HOME at its start.
SHELL_START_UP = (".profile", ".bash_profile", ".bash_login", ".bashrc", ".bash_logout")
START_UP_MAX_BYTES = 64 << 10


def shell_start_up(read: Callable[[str], bytes | None]) -> dict[str, bytes]:
    """The image's shell start-up files, by `read(name)` (None where it has none, or too big)."""
    found = {}
    for name in SHELL_START_UP:
        content = read(name)
        if content is not None and len(content) <= START_UP_MAX_BYTES:
            found[name] = content
    return found


def bind_agent_logs(logs: Path, root: list[str], fds: list[int]) -> list[str]:
    """/logs/agent and /logs/artifacts of the agent's `logs` folder into a grader's `root`, by
    descriptor: the agent may have put a link where a folder was, and a bind by path would
    follow it out of the sandbox. Returns what the grader does not see, and why."""
    notes = []
    for name in ("agent", "artifacts"):
        try:
            fd = trees.open_dir(logs, PurePosixPath(name))
        except OSError:
            notes.append(f"/logs/{name} is not a folder: the grader does not see it")
            continue
        fds.append(fd)
        root += ["--bind-fd", str(fd), f"/logs/{name}"]
    return notes


class Sandbox(Protocol):
    """One started trial environment whose limits the kernel enforces."""

    image: ImageRecord | None  # the image it runs (oci); None on the host's userland
    secrets: Masker  # every log it writes is masked with these as it is written; add to it freely

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> PhaseResult: ...

    def copy_in(self, src: Path, dest: PurePosixPath) -> None: ...  # tests go in after the agent

    def read_file(self, path: PurePosixPath) -> bytes | None: ...  # None unless a regular file

    # What the agent could have touched is read without trusting it (trees.py): links are never
    # followed, FIFOs and devices never opened, sizes capped.
    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> Entry: ...

    def digests(self, path: PurePosixPath) -> dict[str, str]: ...  # a tree's entries, hashed

    def renew_dir(self, path: PurePosixPath, *, keep_in: Path) -> tuple[str, ...]: ...

    def usage(self) -> Usage: ...  # cheap: the sampler calls it a few times a second

    def evidence(self) -> Evidence: ...  # kernel counters; read before close()

    def collect_logs(self, dest: Path) -> tuple[str, ...]: ...  # /logs, kept; what it skipped

    def observables(self) -> Observables: ...  # for the network meter and the health readings
    def network_namespace(self) -> Path | None: ...  # /proc/PID/ns/net, for the model proxy
    def reaches_outside(self) -> bool: ...  # its sealed link out (_netns.py): the task has network

    # The agent's work state for the grader's own namespaces (grader.py); None where the grader
    # cannot stand apart here (a remote engine), and then it runs in the sandbox, as in Harbor.
    def grader_view(self, scratch: Path) -> GraderView | None: ...  # scratch: the grader's

    def close(self) -> None: ...


class Backend(Protocol):
    name: ClassVar[str]

    def enforcement(self) -> Enforcement: ...

    def check(self) -> list[str]: ...  # problems that stop this backend on this host

    def start(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
        secrets: Masker | None = None,  # masked in every log the sandbox writes, as it writes
    ) -> Sandbox: ...

    def reap(self, run_id: str) -> int: ...  # remove what a killed run left; returns the count


@runtime_checkable
class PreparingBackend(Protocol):
    """A backend with work to do once the run's tasks are known, before the first trial (oci
    pulls pinned images; auto makes and checks the backends its tasks are routed to)."""

    def prepare(self, tasks: Sequence[Task]) -> None: ...


@runtime_checkable
class RoutingBackend(Protocol):
    """A backend that sends each task to another one (auto): `name_for` names the backend a
    task gets, which its trial records instead of the router's own name."""

    def name_for(self, task: Task) -> str: ...


@dataclass(frozen=True, slots=True)
class BackendOptions:
    """What every backend is built from: the run it serves."""

    run_id: str
    run_dir: Path
    uv_shim: bool = False  # oci: place uv/uvx before the verifier (offline machines)
    image_mode: str = "auto"  # oci: auto | prebuilt | build (`_pull.ImageMode`)


_BACKENDS: Mapping[str, str] = {
    "auto": "levelfield.sandbox.auto",  # each task where its environment exists
    "process": "levelfield.sandbox.process",
    "oci": "levelfield.sandbox.oci",
}


def backend_names() -> Sequence[str]:
    return tuple(_BACKENDS)


def get_backend(name: str, options: BackendOptions) -> Backend:
    if name not in _BACKENDS:
        raise RunConfigError(f"unknown backend {name!r}: choose one of {', '.join(_BACKENDS)}")
    module = importlib.import_module(_BACKENDS[name])
    return module.create(options)  # type: ignore[no-any-return]
