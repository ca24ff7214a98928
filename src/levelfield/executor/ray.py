"""trials → records on a Ray cluster: each trial is a Ray task whose resources are its floor.

Ray admits a trial on a node only where `num_cpus = cpu_floor` and `memory = memory_floor_bytes`
still fit beside the trials already there, which is what a Kubernetes scheduler does with
requests; on that node the worker builds its own backend and the kernel enforces the ceiling
exactly as on one machine. Records stream back to the driver (`ray.wait`) and are committed one
by one, as with the local executor.

A node that dies mid-trial is not the agent's failure, and Ray's own retries would hide it, so
tasks run with `max_retries=0`: the lost attempt is stored as `infra_error/node_lost` and the
trial runs again as attempt 2 (`RetryPolicy`) wherever its floor fits; Ray never places work on a
node it knows is dead. Both attempts stay in the store.

Where files live. Workers write trial directories under the run directory, which must then be
the same path on every node: true on one machine, or on a shared filesystem (NFS, a Kubernetes
ReadWriteMany volume). Without one, give `scratch_dir`: each node writes under its own
`scratch_dir/<run_id>/trials/`, and the trial directory (logs, trajectory, record.json; the
workspace is gone by then) comes back to the driver packed with the record, up to
MAX_SHIPPED_BYTES. The dataset must be readable at the same path on every node either way, and
every node needs the same levelfield installed; a node that cannot enforce limits (no root, no
cgroups) is refused before the first trial. API keys are read on the node where the agent runs
(the variable named by `api_key_env` in the environment `ray start` ran in, or `api_key_file` at
the same path): they never travel through Ray's object store or its task specs.

Order: with no cap every trial is submitted at once and Ray dispatches them roughly in the
seeded order; a floor no node of the cluster can hold is refused as `sandbox_error`, as locally,
rather than left to wait forever (an autoscaler's larger nodes must be up before the sweep).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import shutil
import socket
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from levelfield.agents import AgentOptions
from levelfield.errors import (
    AdmissionError,
    HostPressure,
    HostUnsupported,
    NodeLost,
    RunConfigError,
    SandboxStartError,
)
from levelfield.executor.local import OnTrial
from levelfield.plan import Trial
from levelfield.policy import Limits
from levelfield.records import Reason, TrialRecord
from levelfield.runner import TrialContext, record_without_sandbox, run_trial
from levelfield.sandbox import Backend, BackendOptions, get_backend
from levelfield.store import Store

# Ray's names for "the process running this task is gone", looked up by name so that this module
# imports without ray. OutOfMemoryError (Ray's memory monitor killed the worker) is host pressure.
LOST_NODE_ERRORS = (
    "NodeDiedError",
    "WorkerCrashedError",
    "RayActorError",
    "LocalRayletDiedError",
    "ObjectLostError",
)
NODE_ID_CHARS = 12  # Ray node ids are 56 hex digits; 12 keep reports readable and stay unique
MAX_SHIPPED_BYTES = 64 << 20  # a trial directory larger than this stays on its node
WAIT_S = 0.5  # how long one ray.wait blocks: bounds how late Ctrl-C is noticed
CANCEL_GRACE_S = 10.0  # cancelled trials close their sandboxes within this, then nodes are reaped
IN_FLIGHT_ROOT = Path(tempfile.gettempdir()) / "levelfield-in-flight"  # node-local by design
_NODE_ID_IN_MESSAGE = re.compile(r"node ID: ([0-9a-f]{16,})")


def import_ray() -> ModuleType:
    """Ray is an optional extra; choosing this executor without it is a configuration error."""
    try:
        import ray
    except ImportError as exc:
        raise RunConfigError(
            "the ray executor needs Ray on the driver and every node: pip install 'levelfield[ray]'"
        ) from exc
    return ray


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Only node loss is retried: every other outcome, infra errors included, is a data point,
    and retrying it would hide the very noise the harness measures."""

    node_lost_retries: int = 1

    @property
    def max_attempts(self) -> int:
        return 1 + self.node_lost_retries


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


def node_name(hostname: str, node_id: str) -> str:
    """What `telemetry.host.node` holds: the machine, and which Ray node on it."""
    return f"{hostname}/{node_id[:NODE_ID_CHARS]}"


def attempt_dir(trial_root: Path, key: str, attempt: int) -> Path:
    """Attempt 1 sits where the local executor puts a trial; a retry beside it, never inside the
    lost attempt's directory, which may still hold that attempt's mounted disk."""
    name = key if attempt == 1 else f"{key}.attempt-{attempt}"
    return (trial_root / "trials" / name).resolve()


# ---- on the worker ------------------------------------------------------------------------------


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

    def start(
        self, task: Any, limits: Limits, *, trial_id: str, trial_dir: Path, mounts: Any = ()
    ) -> Any:
        named = f"{trial_id}-a{self.attempt}"
        return self.inner.start(task, limits, trial_id=named, trial_dir=trial_dir, mounts=mounts)

    def reap(self, run_id: str) -> int:
        return self.inner.reap(run_id)


def run_on_node(trial: Trial, attempt: int, where: NodeRun) -> NodeResult:
    """The body of one Ray task: one attempt of one trial, under the ceiling, on this node."""
    import ray

    node_id = ray.get_runtime_context().get_node_id()
    ctx = _AttemptContext(
        where.run_id,
        where.trial_root,
        where.backend_name,
        node=node_name(socket.gethostname(), node_id),
        concurrency=where.concurrency,
        agent_options=where.agent_options,
        attempt=attempt,
    )
    backend: Backend = get_backend(
        where.backend_name, BackendOptions(where.run_id, where.trial_root)
    )
    if attempt > 1:
        backend = _AttemptBackend(backend, attempt)  # type: ignore[assignment]
    with _in_flight_marker(where.run_id, node_id, f"{trial.key}-a{attempt}") as count:
        ctx.in_flight = count
        if trial.task.path.is_dir():
            record = run_trial(trial, backend, ctx)
        else:
            missing = SandboxStartError(
                f"task directory {trial.task.path} is not on node "
                f"{ctx.node}: every node needs the dataset at that path"
            )
            record = record_without_sandbox(trial, ctx, missing)
    record = record.model_copy(update={"attempt": attempt})
    trial_dir = ctx.trial_dir(trial)
    if trial_dir.is_dir():
        (trial_dir / "record.json").write_text(record.model_dump_json(indent=2))
    return NodeResult(record, _pack(trial_dir) if where.ship_logs else None)


def prepare_host(where: NodeRun, *, check: bool) -> tuple[str, list[str]]:
    """Check that this host can enforce limits, and reap what a lost attempt or a killed run
    left on it (cgroups, mounts, in-flight markers). Runs once per host, with no trial in flight."""
    host = socket.gethostname()
    backend = get_backend(where.backend_name, BackendOptions(where.run_id, where.trial_root))
    problems = backend.check() if check else []
    if not problems:
        with contextlib.suppress(Exception):  # reaping is best effort; the next run retries it
            backend.reap(where.run_id)
    _remove_tree(IN_FLIGHT_ROOT / where.run_id)
    return host, problems


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
        tar.add(trial_dir, arcname=".")
    if buffer.tell() > MAX_SHIPPED_BYTES:
        return None
    _remove_tree(trial_dir)
    return buffer.getvalue()


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ---- on the driver ------------------------------------------------------------------------------


@dataclass
class _Attempt:
    trial: Trial
    number: int
    submitted_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    submitted_s: float = field(default_factory=time.monotonic)

    def mark_submitted(self) -> None:
        self.submitted_at, self.submitted_s = datetime.now(UTC), time.monotonic()


@dataclass
class RayExecutor:
    """Same contract as LocalExecutor. `max_in_flight` caps the trials submitted at once (the
    concurrency factor of a design); None lets the cluster's resources alone decide."""

    ctx: TrialContext
    address: str | None = None
    max_in_flight: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    scratch_dir: Path | None = None

    def __post_init__(self) -> None:
        self._ray = import_ray()
        self._run_on_node = self._ray.remote(run_on_node)
        self._prepare_host = self._ray.remote(prepare_host)
        self._pending: dict[Any, _Attempt] = {}

    def execute(
        self, trials: Sequence[Trial], store: Store, on_trial: OnTrial | None = None
    ) -> int:
        """Run `trials`, committing each record (node_lost attempts too); returns the count."""
        self._connect()
        if self.max_in_flight is None:
            self.ctx.concurrency = max(1, int(_cluster_cpus(self._ray)))
        where = self._node_run()
        self._prepare_hosts(where, check=True)
        self.ctx.in_flight = lambda: len(self._pending)
        try:
            return self._drive(trials, store, on_trial, where)
        except BaseException:
            self._cancel_pending()
            raise
        finally:
            with contextlib.suppress(Exception):  # best effort: the next run reaps again
                self._prepare_hosts(where, check=False)

    def _connect(self) -> None:
        ray = self._ray
        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace="levelfield",
                log_to_driver=False,
                logging_level=logging.WARNING,
            )

    def _node_run(self) -> NodeRun:
        root = self.ctx.run_dir if self.scratch_dir is None else self.scratch_dir / self.ctx.run_id
        return NodeRun(
            self.ctx.backend_name,
            self.ctx.run_id,
            root.resolve(),
            ship_logs=self.scratch_dir is not None,
            concurrency=self.ctx.concurrency,
            agent_options=self.ctx.agent_options,
        )

    def _drive(
        self, trials: Sequence[Trial], store: Store, on_trial: OnTrial | None, where: NodeRun
    ) -> int:
        queue = deque(
            _Attempt(t, n)
            for t, n in zip(trials, _next_attempts(store, trials), strict=True)
            if n is not None and n <= self.retry.max_attempts
        )
        capacity = _node_capacities(self._ray)
        committed = 0
        while queue or self._pending:
            while queue and self._has_room():
                attempt = queue.popleft()
                refusal = _refusal(attempt.trial.limits, capacity)
                if refusal is None:
                    self._pending[self._submit(attempt, where)] = attempt
                    continue
                self._commit(store, on_trial, NodeResult(self._driver_record(attempt, refusal)))
                committed += 1
            if not self._pending:
                continue
            ready, _ = self._ray.wait(list(self._pending), num_returns=1, timeout=WAIT_S)
            for ref in ready:
                attempt = self._pending.pop(ref)
                result, lost = self._settle(ref, attempt)
                self._commit(store, on_trial, result)
                committed += 1
                if lost and attempt.number < self.retry.max_attempts:
                    queue.appendleft(_Attempt(attempt.trial, attempt.number + 1))
        return committed

    def _has_room(self) -> bool:
        return self.max_in_flight is None or len(self._pending) < self.max_in_flight

    def _submit(self, attempt: _Attempt, where: NodeRun) -> Any:
        limits = attempt.trial.limits
        remote = self._run_on_node.options(
            num_cpus=limits.cpu_floor,
            memory=max(1, limits.memory_floor_bytes),
            max_retries=0,  # a lost node must surface as node_lost, not be silently rerun
            retry_exceptions=False,
            name=f"levelfield:{attempt.trial.task.name}:{attempt.trial.key}",
        )
        attempt.mark_submitted()
        return remote.remote(attempt.trial, attempt.number, where)

    def _settle(self, ref: Any, attempt: _Attempt) -> tuple[NodeResult, bool]:
        """The attempt's result, or a driver-built record of how Ray lost it; True when lost."""
        exceptions = self._ray.exceptions
        lost = tuple(getattr(exceptions, n) for n in LOST_NODE_ERRORS if hasattr(exceptions, n))
        try:
            return self._ray.get(ref), False
        except exceptions.TaskCancelledError:
            raise
        except exceptions.OutOfMemoryError as exc:
            return NodeResult(self._driver_record(attempt, HostPressure(str(exc)))), False
        except lost as exc:
            return NodeResult(self._driver_record(attempt, NodeLost(str(exc)))), True
        except exceptions.RayTaskError as exc:  # levelfield raised outside run_trial: our bug
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return NodeResult(self._driver_record(attempt, cause)), False
        except exceptions.RayError as exc:  # Ray itself failed the trial: the infrastructure's
            error = SandboxStartError(f"Ray: {type(exc).__name__}: {exc}")
            return NodeResult(self._driver_record(attempt, error)), False

    def _driver_record(self, attempt: _Attempt, exc: BaseException) -> TrialRecord:
        """A record for an attempt that returned none: its clock runs from submission, since the
        worker's own start time died with it."""
        record = record_without_sandbox(attempt.trial, self.ctx, exc)
        host = record.telemetry.host.model_copy(update={"node": self._lost_node(exc)})
        update: dict[str, Any] = {
            "attempt": attempt.number,
            "started_at": attempt.submitted_at.isoformat(timespec="milliseconds"),
            "duration_s": round(time.monotonic() - attempt.submitted_s, 3),
            "telemetry": record.telemetry.model_copy(update={"host": host}),
        }
        return record.model_copy(update=update)

    def _lost_node(self, exc: BaseException) -> str | None:
        """Ray names the dead node in NodeDiedError's message; its hostname is still listed."""
        match = _NODE_ID_IN_MESSAGE.search(str(exc))
        if match is None:
            return None
        node_id = match.group(1)
        for node in self._ray.nodes():
            if node.get("NodeID") == node_id:
                return node_name(node.get("NodeManagerHostname", "?"), node_id)
        return node_name("?", node_id)

    def _commit(self, store: Store, on_trial: OnTrial | None, result: NodeResult) -> None:
        record = result.record
        store.commit(record)
        self._unpack(record, result.logs_tar)
        if on_trial:
            on_trial(record)

    def _unpack(self, record: TrialRecord, logs_tar: bytes | None) -> None:
        if self.scratch_dir is None or record.reason is Reason.NODE_LOST:
            return
        dest = attempt_dir(self.ctx.run_dir, record.trial_key, record.attempt)
        dest.mkdir(parents=True, exist_ok=True)
        if logs_tar is None:
            (dest / "ON_NODE").write_text(
                f"kept on node {record.telemetry.host.node} under {self.scratch_dir}\n"
            )
            return
        with tarfile.open(fileobj=io.BytesIO(logs_tar), mode="r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # Python < 3.11.4; the archive comes from our own worker
                tar.extractall(dest)

    def _cancel_pending(self) -> None:
        """Ctrl-C: cancelled trials get KeyboardInterrupt, close their sandboxes and are discarded
        (they rerun on resume); what a stuck one leaves is reaped by `_prepare_hosts`."""
        refs = list(self._pending)
        for ref in refs:
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
        with contextlib.suppress(Exception):
            self._ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
        self._pending.clear()

    def _prepare_hosts(self, where: NodeRun, *, check: bool) -> None:
        """One `prepare_host` per machine that can run trials (not per Ray node: several nodes
        on one machine share its cgroups)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray, hosts = self._ray, {}
        for node in ray.nodes():
            if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0:
                hosts.setdefault(node.get("NodeManagerAddress"), node["NodeID"])
        refs = [
            self._prepare_host.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(where, check=check)
            for node_id in hosts.values()
        ]
        problems = [f"{host}: {p}" for host, found in ray.get(refs) for p in found]
        if problems:
            raise HostUnsupported("ray nodes cannot run trials: " + "; ".join(problems))


def _next_attempts(store: Store, trials: Sequence[Trial]) -> list[int | None]:
    """1 for a new trial; one past the last stored attempt when that one's node was lost and the
    driver died before the retry came back (resume); None when a final record is stored."""
    wanted = {t.key for t in trials}
    last: dict[str, TrialRecord] = {}
    for record in store.records():
        key = record.trial_key
        if key in wanted and (key not in last or record.attempt > last[key].attempt):
            last[key] = record
    return [_attempt_after(last.get(t.key)) for t in trials]


def _attempt_after(last: TrialRecord | None) -> int | None:
    if last is None:
        return 1
    return last.attempt + 1 if last.reason is Reason.NODE_LOST else None


def _node_capacities(ray: ModuleType) -> list[tuple[float, float]]:
    return [
        (node["Resources"].get("CPU", 0.0), node["Resources"].get("memory", 0.0))
        for node in ray.nodes()
        if node.get("Alive")
    ]


def _cluster_cpus(ray: ModuleType) -> float:
    return sum(cpus for cpus, _ in _node_capacities(ray))


def _refusal(limits: Limits, capacity: list[tuple[float, float]]) -> AdmissionError | None:
    """A floor no node can hold would wait in Ray's queue forever: refuse it, as locally."""
    if any(
        limits.cpu_floor <= cpus + 1e-9 and limits.memory_floor_bytes <= memory
        for cpus, memory in capacity
    ):
        return None
    largest = max(capacity, default=(0.0, 0.0))
    return AdmissionError(
        f"floor of {limits.cpu_floor:g} CPUs and {limits.memory_floor_bytes >> 20} MiB fits on "
        f"no node of the Ray cluster (largest: {largest[0]:g} CPUs, {int(largest[1]) >> 20} MiB)"
    )
