"""`tasks check`: every problem of a dataset at once, before any run depends on it.

Problems stop a task from running (malformed task.toml, missing test.sh, a Harbor feature such as
sidecar services that no backend runs) or make its score
meaningless (it passes with the nop agent); warnings are worth a look (unknown task.toml keys,
no reference solution, Dockerfile RUN steps the process backend does not replay). Each task also
gets the backend `--backend auto` will send it to, and why.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from levelfield.config import RunConfig
from levelfield.harbor.task_features import refusals
from levelfield.records import Outcome
from levelfield.sandbox.auto import route_task
from levelfield.tasks import Task, load_dataset


@dataclass
class TaskCheck:
    name: str
    path: Path
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    backend: str = ""  # what --backend auto sends it to, and why
    why: str = ""


@dataclass
class DatasetCheck:
    path: Path
    tasks: list[TaskCheck]

    @property
    def has_problems(self) -> bool:
        return any(t.problems for t in self.tasks)


def check_dataset(path: Path, *, with_nop: bool = False, backend: str = "auto") -> DatasetCheck:
    dataset = load_dataset(path)
    checks = [TaskCheck(p.path.name, p.path, problems=[p.message]) for p in dataset.problems]
    loaded = {t.name: _check_task(t, backend) for t in dataset.tasks}
    if with_nop and dataset.tasks:
        for name in _passing_with_nop(path, backend):
            loaded[name].problems.append("passes with the nop agent: its tests check nothing")
    checks += loaded.values()
    return DatasetCheck(path, sorted(checks, key=lambda c: c.name))


def _check_task(task: Task, backend: str) -> TaskCheck:
    route = route_task(task)
    check = TaskCheck(task.name, task.path, backend=route.backend, why=route.why)
    check.problems += refusals(task, route.backend if backend == "auto" else backend)
    if task.unknown_keys:
        check.warnings.append(f"task.toml: unknown keys {', '.join(task.unknown_keys)}")
    if not task.has_solution:
        check.warnings.append("solution/solve.sh missing: the oracle cannot run")
    steps = task.dockerfile_run_steps()
    if steps and route.backend == "process":
        check.warnings.append(
            f"environment/Dockerfile has {len(steps)} RUN step(s): the process "
            "backend runs on the host's userland and skips them (use --backend oci)"
        )
    return check


def _passing_with_nop(path: Path, backend: str) -> list[str]:
    from levelfield.executor import run
    from levelfield.store import reading

    with tempfile.TemporaryDirectory(prefix="levelfield-nop-") as tmp:
        config = RunConfig(
            dataset=path, out=Path(tmp), agents=["nop"], policies=["uncapped"], backend=backend
        )
        result = run(config)
        with reading(result.run_dir) as store:
            return [r.task for r in store.records() if r.outcome is Outcome.PASSED]
