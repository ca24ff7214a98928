"""task → the Harbor features it uses that levelfield cannot run, refused before a trial.

Harbor 0.26's task format (`harbor/models/task/config.py`) has features no levelfield backend
runs yet: sidecar services, a separate grader, several steps, accelerators, another OS, MCP
servers, a network allowlist or a network per phase, another user, environment variables taken
from the host, a healthcheck, agent skills. Run without them, such a task is another task: its
tests fail for a reason that is not the agent's, and the failure is booked to the agent. So each
one is refused, naming the key (or file) and the backend, and the run goes on without the task.

`load_task` keeps the parsed task.toml and the compose files on the task; `refusals` finds the
features there and words them for the backend a trial would use (a run, `tasks check`, levelfield's
environment in Harbor, its sandbox in Inspect). Keys Harbor reads but that change nothing
levelfield runs (`gpus = 0`, `[task]`, `[reward]`, `solution.timeout_sec`, `version`) load as
before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from levelfield.errors import TaskError
from levelfield.sandbox.auto import route_task
from levelfield.tasks import Dataset, Task, TaskProblem, phase_networks

LINUX = "linux"  # Harbor's default `[environment] os`, the only one levelfield runs
ALLOWLIST = "allowlist"
_PHASES = ("agent", "verifier")


@dataclass(frozen=True, slots=True)
class Unsupported:
    """One feature of a task levelfield cannot run: where it is said, what it asks, and what
    would go wrong if the task ran without it."""

    key: str  # as written: "environment.gpus", "[[steps]]", "environment/docker-compose.yaml"
    asks: str
    without_it: str


def find_unsupported(task: Task) -> list[Unsupported]:
    """Every unsupported feature of a task, from its parsed task.toml and its environment/."""
    raw = task.raw_toml
    env = _table(raw, "environment")
    verifier = _table(raw, "verifier")
    agent = _table(raw, "agent")
    return [
        *_compose(task.compose_files),
        *_grader(verifier),
        *_steps(raw),
        *_accelerators(env),
        *_os(env),
        *_network(env, agent, verifier),
        *_users(agent, verifier),
        *_host_env(env, verifier),
        *_environment_extras(env),
    ]


def refusals(task: Task, backend: str) -> list[str]:
    """Why `task` cannot run on `backend` (empty: it can), one reason per feature, each naming
    the key and the backend. No backend runs any of them yet, so the backend is only named."""
    return [
        f"{u.key}: {u.asks}; levelfield's {backend} backend does not run it ({u.without_it}), "
        "so the task is refused rather than run as another task"
        for u in find_unsupported(task)
    ]


def refuse_unsupported(task: Task, backend: str) -> None:
    """Raise the task's refusals as one TaskError; `backend` "auto" names the one it routes to."""
    reasons = refusals(task, _routed(task, backend))
    if reasons:
        raise TaskError(task.path, "; ".join(reasons))


def without_refused(dataset: Dataset, backend: str) -> Dataset:
    """The dataset with each refused task moved to its problems: skipped with its reason, as a
    malformed task is, while the others run."""
    kept: list[Task] = []
    problems = list(dataset.problems)
    for task in dataset.tasks:
        try:
            refuse_unsupported(task, backend)
        except TaskError as exc:
            problems.append(TaskProblem(task.path, str(exc)))
        else:
            kept.append(task)
    return replace(dataset, tasks=tuple(kept), problems=tuple(problems))


def _routed(task: Task, backend: str) -> str:
    return route_task(task).backend if backend == "auto" else backend


def _table(raw: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = raw.get(name)
    return value if isinstance(value, Mapping) else {}


def _is_set(value: Any) -> bool:
    """Harbor's "given": present and not empty (`env = {}`, `collect = []` ask nothing)."""
    return value is not None and value != {} and value != [] and value != ""


def _compose(compose_files: tuple[str, ...]) -> list[Unsupported]:
    return [
        Unsupported(
            f"environment/{name}",
            "sidecar services (Docker Compose)",
            "the trial would start without its services",
        )
        for name in compose_files
    ]


def _grader(verifier: Mapping[str, Any]) -> list[Unsupported]:
    found = []
    if verifier.get("environment_mode") == "separate":
        found.append(
            Unsupported(
                'verifier.environment_mode = "separate"',
                "a separate grader",
                "the tests would run in the agent's sandbox",
            )
        )
    if "environment" in verifier:
        found.append(
            Unsupported(
                "[verifier.environment]",
                "a grader environment of its own",
                "the tests would run in the agent's sandbox",
            )
        )
    if _is_set(verifier.get("collect")):
        found.append(
            Unsupported(
                "[[verifier.collect]]",
                "hooks that snapshot services' state",
                "no hook would run and the grader would miss its files",
            )
        )
    return found


def _steps(raw: Mapping[str, Any]) -> list[Unsupported]:
    without_it = "only the first instruction and one verifier would run"
    found = []
    if _is_set(raw.get("steps")):
        found.append(Unsupported("[[steps]]", "a multi-step task", without_it))
    if raw.get("multi_step_reward_strategy") is not None:
        found.append(Unsupported("multi_step_reward_strategy", "a multi-step task", without_it))
    return found


def _accelerators(env: Mapping[str, Any]) -> list[Unsupported]:
    without_it = "a trial gets none"
    found = []
    gpus = env.get("gpus")
    if gpus is not None and gpus != 0:
        found.append(Unsupported(f"environment.gpus = {gpus!r}", "GPUs", without_it))
    if env.get("gpu_types") is not None:
        found.append(Unsupported("environment.gpu_types", "a GPU type", without_it))
    if env.get("tpu") is not None:
        found.append(Unsupported("environment.tpu", "a TPU slice", without_it))
    return found


def _os(env: Mapping[str, Any]) -> list[Unsupported]:
    os_name = env.get("os", LINUX)
    if isinstance(os_name, str) and os_name.lower() == LINUX:  # Harbor ignores its case
        return []
    return [
        Unsupported(
            f"environment.os = {os_name!r}", f"a {os_name} container", "trials run Linux only"
        )
    ]


def _network(
    env: Mapping[str, Any], agent: Mapping[str, Any], verifier: Mapping[str, Any]
) -> list[Unsupported]:
    """Harbor resolves a network per phase: the phase's own `network_mode`, else
    `[environment]`'s (whose default is public). levelfield gives a trial one network, off or
    open, for both phases."""
    found = []
    for name, table in (("environment", env), ("agent", agent), ("verifier", verifier)):
        if table.get("network_mode") == ALLOWLIST:
            key = f'{name}.network_mode = "allowlist"'
        elif table.get("allowed_hosts") is not None:
            key = f"{name}.allowed_hosts"
        else:
            continue
        found.append(
            Unsupported(
                key, "a network allowlist", "a trial's network is either off or open to all hosts"
            )
        )
    modes = phase_networks(env, agent, verifier)
    if not found and modes["agent"] != modes["verifier"]:
        found.append(
            Unsupported(
                "agent.network_mode / verifier.network_mode",
                f"network {modes['agent']} for the agent and {modes['verifier']} for the verifier",
                "one sandbox runs both phases under one network",
            )
        )
    return found


def _users(agent: Mapping[str, Any], verifier: Mapping[str, Any]) -> list[Unsupported]:
    return [
        Unsupported(
            f"{phase}.user = {table['user']!r}",
            f"the {phase} running as another user",
            "it would run as the sandbox's own user",
        )
        for phase, table in zip(_PHASES, (agent, verifier), strict=True)
        if table.get("user") is not None
    ]


def _host_env(env: Mapping[str, Any], verifier: Mapping[str, Any]) -> list[Unsupported]:
    return [
        Unsupported(
            f"{name}.env", "environment variables resolved from the host", "they would not be set"
        )
        for name, table in (("environment", env), ("verifier", verifier))
        if _is_set(table.get("env"))
    ]


def _environment_extras(env: Mapping[str, Any]) -> list[Unsupported]:
    extras = (
        ("mcp_servers", "MCP servers for the agent", "the agent would get none"),
        (
            "healthcheck",
            "a readiness check before the agent starts",
            "the agent could start before its environment is ready",
        ),
        ("skills_dir", "agent skills copied from the environment", "the agent would get none"),
    )
    return [
        Unsupported(f"environment.{key}", asks, without_it)
        for key, asks, without_it in extras
        if _is_set(env.get(key))
    ]
