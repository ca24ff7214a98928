"""Sandboxes: where a trial runs under its limits. One backend per module, chosen by name.

Backends satisfy the `Backend` protocol without inheriting from anything; the registry maps a
name to a module so that an SDK (docker, ray) loads only when its backend is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import ClassVar, Protocol

from levelfield.errors import RunConfigError
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.records import Evidence, ImageRecord, PhaseResult
from levelfield.sandbox._tree import Entry
from levelfield.tasks import Task

# What a default Docker container holds (moby's oci/caps/defaults.go): no phase of any backend
# holds more. The process backend also leaves out mknod, which only Docker's device cgroup makes
# harmless; doctor shows what an agent's shell really holds on each.
DEFAULT_CAPABILITIES = (
    "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
    "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap",
)  # fmt: skip


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

    # What the agent could have touched is read without trusting it (_tree.py): links are never
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
