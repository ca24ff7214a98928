"""The worker side of the Ray executor: one attempt of one trial on the node Ray chose, and the
per-host preparation (check, reap) the driver asks each machine for.

A worker first claims its attempt's token (`_ray_attempts`): an attempt the driver has already
given up on, or one whose raylet is gone, is refused before anything is created on the node.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levelfield.agents import AgentOptions
from levelfield.errors import SandboxStartError
from levelfield.executor import _ray_attempts
from levelfield.plan import Trial
from levelfield.policy import Limits
from levelfield.records import TrialRecord
from levelfield.runner import TrialContext, record_without_sandbox, run_trial
from levelfield.sandbox import Backend, BackendOptions, RoutingBackend, get_backend
from levelfield.sandbox.trees import remove_path

NODE_ID_CHARS = 12  # Ray node ids are 56 hex digits; 12 keep reports readable and stay unique
MAX_SHIPPED_BYTES = 64 << 20  # a trial directory larger than this stays on its node
IN_FLIGHT_ROOT = Path(tempfile.gettempdir()) / "levelfield-in-flight"  # node-local by design


@dataclass(frozen=True, slots=True)
class NodeRun:
    """What a worker needs to build its own backend and trial directories."""

    backend_name: str
    run_id: str
    trial_root: Path  # the run directory (shared), or scratch_dir/<run_id> (node-local)
    ship_logs: bool
    concurrency: int
    agent_options: AgentOptions  # names where API keys are read: env or file on each node


@dataclass(frozen=True, slots=True)
class NodeResult:
    record: TrialRecord
    logs_tar: bytes | None = None  # the packed trial directory when it lives in node scratch


@dataclass(frozen=True, slots=True)
class Refused:
    """An attempt the worker did not start: nothing of it exists on the node."""

    node: str
    why: str


@dataclass(frozen=True, slots=True)
class HostPrep:
    """What `prepare_host` found on one machine."""

    host: str
    problems: list[str]
    reaped: int  # cgroups, mounts and containers of the run removed there


def node_name(hostname: str, node_id: str) -> str:
    """What `telemetry.host.node` holds: the machine, and which Ray node on it."""
    return f"{hostname}/{node_id[:NODE_ID_CHARS]}"


def attempt_dir(trial_root: Path, key: str, attempt: int) -> Path:
    """Attempt 1 sits where the local executor puts a trial; a retry beside it, never inside the
    lost attempt's directory, which may still hold that attempt's mounted disk."""
    name = key if attempt == 1 else f"{key}.attempt-{attempt}"
    return (trial_root / "trials" / name).resolve()


@dataclass
class _AttemptContext(TrialContext):
    attempt: int = 1

    def trial_dir(self, trial: Trial) -> Path:
        return attempt_dir(self.run_dir, trial.key, self.attempt)


class _AttemptBackend:
    """Gives a retry its own sandbox name: with several Ray nodes on one machine, the lost
    attempt's cgroup may still exist on this host and must not absorb the retry's processes."""

    def __init__(self, inner: Backend, attempt: int) -> None:
        self.inner, self.attempt = inner, attempt
        self.name = inner.name

    def enforcement(self) -> Any:
        return self.inner.enforcement()

    def check(self) -> list[str]:
        return self.inner.check()

    def start(self, task: Any, limits: Limits, *, trial_id: str, **kwargs: Any) -> Any:
        named = f"{trial_id}-a{self.attempt}"
        return self.inner.start(task, limits, trial_id=named, **kwargs)

    def reap(self, run_id: str) -> int:
        return self.inner.reap(run_id)


def run_on_node(trial: Trial, attempt: int, where: NodeRun, token: str) -> NodeResult | Refused:
    """The body of one Ray task: one attempt of one trial, under the ceiling, on this node."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    node = node_name(socket.gethostname(), node_id)
    if not _ray_attempts.claim(token):
        return Refused(node, "the driver had given this attempt up before it could start")
    gone = _ray_attempts.raylet_gone()  # checked after the claim: the driver revokes on death
    if gone is not None:
        return Refused(node, gone)
    ctx = _AttemptContext(
        where.run_id,
        where.trial_root,
        where.backend_name,
        node=node,
        concurrency=where.concurrency,
        agent_options=where.agent_options,
        attempt=attempt,
    )
    with _in_flight_marker(where.run_id, node_id, f"{trial.key}-a{attempt}") as count:
        ctx.in_flight = count
        record = _run_attempt(trial, attempt, where, ctx)
    record = record.model_copy(update={"attempt": attempt})
    trial_dir = ctx.trial_dir(trial)
    if trial_dir.is_dir():
        (trial_dir / "record.json").write_text(record.model_dump_json(indent=2))
    return NodeResult(record, _pack(trial_dir) if where.ship_logs else None)


def _run_attempt(trial: Trial, attempt: int, where: NodeRun, ctx: TrialContext) -> TrialRecord:
    backend: Backend = get_backend(
        where.backend_name, BackendOptions(where.run_id, where.trial_root)
    )
    routes = isinstance(backend, RoutingBackend)
    ctx.route = backend.name_for if routes else None  # auto: routed on the node, as locally
    if attempt > 1:
        backend = _AttemptBackend(backend, attempt)  # type: ignore[assignment]
    if trial.task.path.is_dir():
        return run_trial(trial, backend, ctx)
    missing = SandboxStartError(
        f"task directory {trial.task.path} is not on node "
        f"{ctx.node}: every node needs the dataset at that path"
    )
    return record_without_sandbox(trial, ctx, missing)


def prepare_host(where: NodeRun, *, check: bool) -> HostPrep:
    """Check that this host can enforce limits, and reap what a lost attempt or a killed run
    left on it (cgroups, mounts, in-flight markers). Runs once per host, with no trial in flight."""
    host = socket.gethostname()
    backend = get_backend(where.backend_name, BackendOptions(where.run_id, where.trial_root))
    problems = backend.check() if check else []
    reaped = 0
    if not problems:
        with contextlib.suppress(Exception):  # reaping is best effort; the next run retries it
            reaped = backend.reap(where.run_id)
    _remove_tree(IN_FLIGHT_ROOT / where.run_id)
    return HostPrep(host, problems, reaped)


@contextlib.contextmanager
def _in_flight_marker(run_id: str, node_id: str, name: str) -> Iterator[Callable[[], int]]:
    """Trials in flight on this Ray node, for the telemetry: one marker file per running trial,
    because each trial runs in its own worker process and they share nothing else."""
    directory = IN_FLIGHT_ROOT / run_id / node_id
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / name
    marker.touch()
    try:
        yield lambda: sum(1 for _ in directory.iterdir()) if directory.is_dir() else 1
    finally:
        marker.unlink(missing_ok=True)


def _pack(trial_dir: Path) -> bytes | None:
    """The trial directory as a gzipped tar, removed from the node once packed; None when too big
    (it then stays on the node, and the driver notes where)."""
    if not trial_dir.is_dir():
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        _add_tree(tar, trial_dir)
    if buffer.tell() > MAX_SHIPPED_BYTES:
        return None
    _remove_tree(trial_dir)
    return buffer.getvalue()


def _add_tree(tar: tarfile.TarFile, root: Path) -> None:
    """`tar.add(root)` without its recursion: the trial directory holds the agent's /logs, whose
    folders may nest deeper than Python's recursion limit. Links are added as links."""
    tar.add(root, arcname=".", recursive=False)
    stack = [root]
    while stack:
        directory = stack.pop()
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                path = Path(entry.path)
                tar.add(path, arcname=f"./{path.relative_to(root)}", recursive=False)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)


def _remove_tree(path: Path) -> None:
    with contextlib.suppress(OSError):
        remove_path(path)  # iterative: it holds the agent's deepest folders
