"""dataset → tasks: load and validate Harbor-format task directories.

A task is `task.toml`, `instruction.md`, `environment/` (Dockerfile + build context),
`tests/test.sh` and optionally `solution/solve.sh`. Sizes become bytes here, once. A malformed
task yields a `TaskProblem` naming the file and the field; it never stops the other tasks.
task.toml tolerates unknown keys (Harbor adds them over time) but the loader lists them; known
keys must have their TOML type (`cpus = "2"` or `cpus = true` is refused, not read as 2 or 1).
Refused too, each with its own message: a Dockerfile without FROM, an instruction.md that is not
UTF-8 text, and a symlink leading out of the task directory (a task must carry what it uses).
Harbor features no backend runs (sidecar services, a separate grader, ...) load: the task keeps
its parsed task.toml, from which `harbor.task_features.refusals` words the reasons a run, `tasks
check` or a hosted trial refuses it with.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from levelfield._units import parse_bytes
from levelfield.errors import TaskError

# Harbor's defaults for a task.toml that leaves a field out (harbor/models/task/config.py).
DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MB = 2048
DEFAULT_STORAGE_MB = 10240
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_WORKDIR = PurePosixPath("/app")  # the WORKDIR every Terminal-Bench 2.0 Dockerfile sets
_MIB = 1024 * 1024
NetworkMode = Literal["no-network", "public", "allowlist"]  # Harbor 0.26's NetworkMode values
PUBLIC = "public"  # Harbor's default network mode
COMPOSE_FILES = ("docker-compose.yaml", "docker-compose.yml")  # sidecars, in environment/


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    network_mode: NetworkMode | None = None  # [environment]'s, or a phase's own (Harbor 0.26)
    allowed_hosts: list[str] | None = None  # with "allowlist", which harbor.task_features refuses

    def unknown_keys(self) -> list[str]:
        return sorted((self.model_extra or {}).keys())


class _EnvironmentSection(_Section):
    cpus: float = Field(DEFAULT_CPUS, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    memory: str | None = None  # older Harbor spelling: "2G"
    storage_mb: int | None = Field(None, gt=0)
    storage: str | None = None
    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    allow_internet: bool | None = None
    # levelfield's own key: "host" = the task runs on the host's userland (process backend);
    # "image" (the default) = on its image, whose userland its tests expect.
    userland: Literal["image", "host"] = "image"

    @model_validator(mode="after")
    def _sizes_parse(self) -> _EnvironmentSection:
        for name in ("memory", "storage"):
            text = getattr(self, name)
            if text is not None:
                try:
                    if parse_bytes(text) <= 0:
                        raise ValueError("must be positive")
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
        return self


class _TimeoutSection(_Section):
    timeout_sec: float = Field(DEFAULT_TIMEOUT_S, gt=0)


class _TaskToml(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    version: str = "1.0"
    metadata: dict[str, Any] = Field(default_factory=dict)
    environment: _EnvironmentSection = Field(default_factory=_EnvironmentSection)
    agent: _TimeoutSection = Field(default_factory=_TimeoutSection)
    verifier: _TimeoutSection = Field(default_factory=_TimeoutSection)


@dataclass(frozen=True, slots=True)
class Spec:
    """The task's own resource request: the "1x" every policy multiplies."""

    cpus: float
    memory_bytes: int
    storage_bytes: int


@dataclass(frozen=True, slots=True)
class Task:
    name: str
    path: Path
    spec: Spec
    instruction: str
    agent_timeout_s: float
    verifier_timeout_s: float
    build_timeout_s: float
    workdir: PurePosixPath
    # None: task.toml does not say. The process backend then keeps the network off; the oci
    # backend follows Harbor, whose default is on (Terminal-Bench verifiers install pytest).
    allow_internet: bool | None = None
    docker_image: str | None = None
    userland: str = "image"  # "host": declared to run on the host's userland (process)
    metadata: dict[str, Any] = field(default_factory=dict)
    unknown_keys: tuple[str, ...] = ()
    # task.toml as parsed and the compose files of environment/: what harbor.task_features
    # reads to refuse the Harbor features no backend runs (sidecars, a separate grader, ...)
    raw_toml: dict[str, Any] = field(default_factory=dict)
    compose_files: tuple[str, ...] = ()

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def has_solution(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()

    def dockerfile_run_steps(self) -> list[str]:
        """RUN lines the process backend cannot replay (it runs on the host's userland)."""
        dockerfile = self.environment_dir / "Dockerfile"
        if not dockerfile.is_file():
            return []
        lines = dockerfile.read_text(errors="replace").splitlines()
        return [ln.strip() for ln in lines if ln.strip().upper().startswith("RUN ")]


@dataclass(frozen=True, slots=True)
class TaskProblem:
    path: Path
    message: str


@dataclass(frozen=True, slots=True)
class Dataset:
    """Tasks that loaded, and the problems of those that did not."""

    path: Path
    tasks: tuple[Task, ...]
    problems: tuple[TaskProblem, ...]

    def by_name(self) -> dict[str, Task]:
        return {t.name: t for t in self.tasks}


def load_dataset(path: Path) -> Dataset:
    """A directory of tasks, or a single task directory (one holding task.toml)."""
    path = Path(path)
    if not path.is_dir():
        raise TaskError(path, "dataset directory not found")
    candidates = [path] if (path / "task.toml").is_file() else _task_dirs(path)
    tasks: list[Task] = []
    problems: list[TaskProblem] = []
    for candidate in candidates:
        try:
            tasks.append(load_task(candidate))
        except TaskError as exc:
            problems.append(TaskProblem(candidate, str(exc)))
        except (OSError, ValueError, RuntimeError) as exc:  # unreadable, a symlink loop
            problems.append(TaskProblem(candidate, f"{candidate}: cannot be read: {exc}"))
    return Dataset(path, tuple(tasks), tuple(problems))


def _task_dirs(path: Path) -> list[Path]:
    """Subdirectories that look like tasks: a task.toml, or any Harbor part (so typos surface)."""
    markers = ("task.toml", "instruction.md", "tests", "environment")
    return sorted(
        p
        for p in path.iterdir()
        if p.is_dir() and not p.name.startswith(".") and any((p / m).exists() for m in markers)
    )


def load_task(path: Path) -> Task:
    path = Path(path).resolve()
    _refuse_links_out(path)
    raw = _read_toml(path / "task.toml")
    config = _validated(raw, path / "task.toml")
    instruction = _read_instruction(path / "instruction.md")
    _require_file(path / "tests" / "test.sh", "the verifier script")
    _require_from(path / "environment" / "Dockerfile")
    env = config.environment
    return Task(
        name=path.name,
        path=path,
        spec=_spec_of(env),
        instruction=instruction,
        agent_timeout_s=config.agent.timeout_sec,
        verifier_timeout_s=config.verifier.timeout_sec,
        build_timeout_s=env.build_timeout_sec,
        workdir=_workdir_of(path / "environment" / "Dockerfile"),
        allow_internet=_allow_internet(raw, config),
        docker_image=env.docker_image,
        userland=env.userland,
        metadata=dict(config.metadata),
        unknown_keys=tuple(_unknown_keys(config)),
        raw_toml=raw,
        compose_files=tuple(n for n in COMPOSE_FILES if (path / "environment" / n).is_file()),
    )


def _read_toml(toml_path: Path) -> dict[str, Any]:
    _require_file(toml_path, "the task's configuration")
    try:
        return tomllib.loads(toml_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskError(toml_path, f"not valid TOML: {exc}") from exc


def _validated(raw: dict[str, Any], toml_path: Path) -> _TaskToml:
    try:
        return _TaskToml.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field_name = ".".join(str(p) for p in first["loc"]) or None
        raise TaskError(toml_path, first["msg"], field=field_name) from exc


def _allow_internet(raw: dict[str, Any], config: _TaskToml) -> bool | None:
    """Harbor 0.26's `network_mode` (any table) decides when given, as the agent's phase has it
    (a verifier with another network is refused); else the older `allow_internet`, or None."""
    sections = (config.environment, config.agent, config.verifier)
    if all(s.network_mode is None for s in sections):
        return config.environment.allow_internet
    tables = (raw.get(name, {}) for name in ("environment", "agent", "verifier"))
    return phase_networks(*tables)["agent"] == PUBLIC


def phase_networks(
    env: Mapping[str, Any], agent: Mapping[str, Any], verifier: Mapping[str, Any]
) -> dict[str, str]:
    """Each phase's network mode as Harbor 0.26 resolves it: the phase's own `network_mode`,
    else `[environment]`'s, whose default is public; the deprecated `allow_internet` counts only
    where `[environment] network_mode` is not given."""
    base = env.get("network_mode")
    if base is None:
        legacy = env.get("allow_internet")
        base = PUBLIC if legacy is None or legacy else "no-network"
    return {
        phase: table.get("network_mode") or base
        for phase, table in (("agent", agent), ("verifier", verifier))
    }


def _require_file(path: Path, what: str) -> None:
    if not path.is_file():
        raise TaskError(path, f"missing ({what})")


def _read_instruction(path: Path) -> str:
    """The agent's prompt: text, or the agent would be handed replacement characters."""
    _require_file(path, "the task's instruction to the agent")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError(
            path, f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from None
    if "\0" in text:
        raise TaskError(path, f"binary, not text (a NUL byte at offset {text.index(chr(0))})")
    return text


_FROM_LINE = re.compile(r"^\s*FROM\s+\S", re.IGNORECASE | re.MULTILINE)


def _require_from(dockerfile: Path) -> None:
    """No FROM, no image: the oci backend could not build it, and the process backend would
    run a task whose environment nobody can reproduce. A task without a Dockerfile is allowed
    (task.toml's docker_image, or the host's userland on the process backend)."""
    if dockerfile.is_file() and not _FROM_LINE.search(dockerfile.read_text(errors="replace")):
        raise TaskError(dockerfile, "no FROM instruction: there is no base image to build on")


def _refuse_links_out(root: Path) -> None:
    """A symlink whose target lies outside the task: the sandbox would read or run whatever
    the host has there (or nothing, on another machine)."""
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            link = Path(directory) / name
            if not link.is_symlink():
                continue
            target = (link.parent / os.readlink(link)).resolve()
            if target != root and root not in target.parents:
                raise TaskError(link, f"a symlink to {target}, outside the task")


def _spec_of(env: _EnvironmentSection) -> Spec:
    memory = env.memory_mb * _MIB if env.memory_mb else None
    storage = env.storage_mb * _MIB if env.storage_mb else None
    return Spec(
        cpus=float(env.cpus),
        memory_bytes=memory
        or (parse_bytes(env.memory) if env.memory else DEFAULT_MEMORY_MB * _MIB),
        storage_bytes=storage
        or (parse_bytes(env.storage) if env.storage else DEFAULT_STORAGE_MB * _MIB),
    )


_WORKDIR_LINE = re.compile(r"^\s*WORKDIR\s+(\S+)", re.IGNORECASE | re.MULTILINE)


def _workdir_of(dockerfile: Path) -> PurePosixPath:
    """The last WORKDIR of the Dockerfile, as the container would start in it."""
    if not dockerfile.is_file():
        return DEFAULT_WORKDIR
    found = _WORKDIR_LINE.findall(dockerfile.read_text(errors="replace"))
    if not found or not found[-1].startswith("/"):
        return DEFAULT_WORKDIR
    return PurePosixPath(found[-1])


def _unknown_keys(config: _TaskToml) -> list[str]:
    keys = [f"{k}" for k in (config.model_extra or {})]
    for name in ("environment", "agent", "verifier"):
        keys += [f"{name}.{k}" for k in getattr(config, name).unknown_keys()]
    return keys
