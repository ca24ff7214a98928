"""The `auto` backend (the default): each task runs where its environment exists.

A task whose environment is an image (its Dockerfile's FROM, or task.toml's `docker_image`) runs
on `oci`: its test.sh expects that image's userland (apt-get, a writable /usr, curl, uvx), and on
the host's read-only userland it would fail for reasons that are not the agent's. Only a task
that declares `environment.userland = "host"` in task.toml (as examples/noise-suite's do), or
that names no image at all, runs on `process`. With no engine reachable, the tasks that need one
are refused before the first trial, with the setup command; nothing of them is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from levelfield.errors import HostUnsupported, RunConfigError
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.sandbox import (
    Backend,
    BackendOptions,
    Enforcement,
    PreparingBackend,
    ReadOnlyMount,
    Sandbox,
    get_backend,
)
from levelfield.sandbox.oci import engine_report, from_images
from levelfield.tasks import Task

SETUP_COMMAND = "scripts/oci_setup.sh"  # podman + its API socket; scripts/docker_setup.sh: Docker


@dataclass(frozen=True, slots=True)
class Route:
    """The backend a task gets under `auto`, and why (what `tasks check` prints)."""

    backend: str
    why: str


def route_task(task: Task) -> Route:
    if task.userland == "host":
        return Route("process", 'task.toml declares environment.userland = "host"')
    image = _image_of(task)
    if image:
        return Route("oci", f"its environment is an image ({image})")
    return Route("process", "names no image (no Dockerfile FROM, no docker_image)")


def _image_of(task: Task) -> str:
    dockerfile = task.environment_dir / "Dockerfile"
    bases = from_images(dockerfile) if dockerfile.is_file() else []
    parts = [f"FROM {bases[0]}"] if bases else []
    if task.docker_image:
        parts.append(f"docker_image {task.docker_image}")
    return ", ".join(parts)


def engine_problems() -> list[str]:
    """Why no container engine answers here; empty when one does."""
    return list(engine_report().problems)


def refuse_unrunnable(tasks: Sequence[Task], *, uv_shim: bool = False) -> None:
    """Before anything is stored: tasks that need an engine when none answers, and --uv-shim
    on tasks that run on the host's userland. One message naming every task concerned."""
    routes = {t.name: route_task(t) for t in tasks}
    on_oci = sorted(n for n, r in routes.items() if r.backend == "oci")
    if on_oci:
        problems = engine_problems()
        if problems:
            raise HostUnsupported(
                f"{len(on_oci)} task(s) need a container engine and none is reachable "
                f"({'; '.join(problems)}): {', '.join(on_oci)}. Their environment is an image, "
                "and on the host's userland their tests would fail for reasons that are not the "
                f"agent's. Set up an engine with `{SETUP_COMMAND}` (podman) or "
                "`scripts/docker_setup.sh` (Docker), or run only the tasks that declare "
                'environment.userland = "host". No trial was run or stored.'
            )
    on_host = sorted(n for n, r in routes.items() if r.backend == "process")
    if uv_shim and on_host:
        raise RunConfigError(uv_shim_refusal(on_host))


def uv_shim_refusal(task_names: Sequence[str]) -> str:
    return (
        f"--uv-shim places uv/uvx inside a container image; {', '.join(task_names)} run on the "
        "process backend, whose /usr is the host's, read-only: install uv on the host instead "
        "(it is then on the sandbox's PATH), or drop --uv-shim"
    )


class AutoBackend:
    """Routes each task to `process` or `oci` (`route_task`); both made only when used."""

    name: ClassVar[str] = "auto"

    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        self._made: dict[str, Backend] = {}

    def backend_for(self, task: Task) -> Backend:
        return self._backend(route_task(task).backend)

    def name_for(self, task: Task) -> str:
        return route_task(task).backend

    def _backend(self, name: str) -> Backend:
        if name not in self._made:
            self._made[name] = get_backend(name, self.options)
        return self._made[name]

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Make the backends these tasks need, check them, and let oci pull pinned images."""
        by_backend: dict[str, list[Task]] = {}
        for task in tasks:
            by_backend.setdefault(route_task(task).backend, []).append(task)
        for name, routed in sorted(by_backend.items()):
            backend = self._backend(name)
            problems = backend.check()
            if problems:
                names = ", ".join(sorted(t.name for t in routed))
                raise HostUnsupported(f"backend {name} (for {names}): " + "; ".join(problems))
            if isinstance(backend, PreparingBackend):
                backend.prepare(routed)

    def check(self) -> list[str]:
        return []  # per backend, in `prepare`, once the tasks are known

    def enforcement(self) -> Enforcement:
        made = [self._made[n] for n in sorted(self._made)] or [self._backend("process")]
        if len(made) == 1:
            return made[0].enforcement()
        parts = [b.enforcement() for b in made]
        fields = Enforcement.__dataclass_fields__
        merged = {
            f: "; ".join(f"{b.name}: {getattr(e, f)}" for b, e in zip(made, parts, strict=True))
            for f in fields
        }
        return Enforcement(**merged)

    def start(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
        secrets: Masker | None = None,
    ) -> Sandbox:
        backend = self.backend_for(task)
        return backend.start(
            task, limits, trial_id=trial_id, trial_dir=trial_dir, mounts=mounts, secrets=secrets
        )

    def reap(self, run_id: str) -> int:
        """What a killed run left on every backend it could have used."""
        removed = self._backend("process").reap(run_id)
        if not engine_problems():
            removed += self._backend("oci").reap(run_id)
        return removed


def create(options: BackendOptions) -> AutoBackend:
    return AutoBackend(options)
