"""trials → records on a Ray cluster: each trial is a Ray task whose resources are its floor.

Ray admits a trial on a node only where `num_cpus = cpu_floor` and `memory = memory_floor_bytes`
still fit beside the trials already there, which is what a Kubernetes scheduler does with
requests; on that node the worker builds its own backend and the kernel enforces the ceiling
exactly as on one machine. Records stream back to the driver (`ray.wait`) and are committed one
by one, as with the local executor.

A node that dies mid-trial is not the agent's failure, and Ray's own retries would hide it, so
tasks run with `max_retries=0`: the lost attempt is stored as `infra_error/node_lost` and the
trial runs again as attempt 2 (`RetryPolicy`) wherever its floor fits; Ray never places work on a
node it knows is dead. Both attempts stay in the store. A worker claims its attempt's token
before it creates anything and the driver revokes it before the retry (`_ray_attempts`), so an
attempt given up on never starts late on a dying node; what one that had started leaves there is
reaped by the run's next reap on that host, and the run's meta lists it under `reaped`.

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
import tarfile
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from levelfield._room import check_room
from levelfield.errors import (
    AdmissionError,
    HostPressure,
    HostUnsupported,
    NodeLost,
    RunConfigError,
    SandboxStartError,
)
from levelfield.executor import _ray_attempts
from levelfield.executor._ray_node import (
    IN_FLIGHT_ROOT,
    HostPrep,
    NodeResult,
    NodeRun,
    Refused,
    attempt_dir,
    node_name,
    prepare_host,
    run_on_node,
)
from levelfield.executor._reaping import note_reaped
from levelfield.executor.local import OnTrial
from levelfield.plan import Trial
from levelfield.policy import Limits
from levelfield.records import Reason, TrialRecord
from levelfield.runner import TrialContext, record_without_sandbox
from levelfield.sandbox.archives import extract
from levelfield.store import Store

__all__ = ["IN_FLIGHT_ROOT", "RayExecutor", "RetryPolicy", "import_ray"]

# Ray's names for "the process running this task is gone", looked up by name so that this module
# imports without ray. OutOfMemoryError (Ray's memory monitor killed the worker) is host pressure.
LOST_NODE_ERRORS = (
    "NodeDiedError",
    "WorkerCrashedError",
    "RayActorError",
    "LocalRayletDiedError",
    "ObjectLostError",
)
WAIT_S = 0.5  # how long one ray.wait blocks: bounds how late Ctrl-C is noticed
CANCEL_GRACE_S = 10.0  # cancelled trials close their sandboxes within this, then nodes are reaped
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


@dataclass
class _Attempt:
    trial: Trial
    number: int
    token: str = ""  # set at submission: the worker claims it, the driver revokes it
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
        self._tokens = ""  # this execution's token prefix

    def execute(
        self, trials: Sequence[Trial], store: Store, on_trial: OnTrial | None = None
    ) -> int:
        """Run `trials`, committing each record (node_lost attempts too); returns the count."""
        self._connect()
        if self.max_in_flight is None:
            self.ctx.concurrency = max(1, int(_cluster_cpus(self._ray)))
        where = self._node_run()
        self._tokens = _ray_attempts.execution_prefix(self.ctx.run_id)
        self._prepare_hosts(where, store, check=True)
        self.ctx.in_flight = lambda: len(self._pending)
        try:
            return self._drive(trials, store, on_trial, where)
        except BaseException:
            self._cancel_pending()
            raise
        finally:
            with contextlib.suppress(Exception):  # best effort: the next run reaps again
                self._prepare_hosts(where, store, check=False)

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
        attempt.token = _ray_attempts.attempt_token(self._tokens, attempt.trial.key, attempt.number)
        return remote.remote(attempt.trial, attempt.number, where, attempt.token)

    def _settle(self, ref: Any, attempt: _Attempt) -> tuple[NodeResult, bool]:
        """The attempt's result, or a driver-built record of how Ray lost it; True when lost."""
        exceptions = self._ray.exceptions
        lost = tuple(getattr(exceptions, n) for n in LOST_NODE_ERRORS if hasattr(exceptions, n))
        try:
            result = self._ray.get(ref)
        except exceptions.TaskCancelledError:
            raise
        except exceptions.OutOfMemoryError as exc:
            return NodeResult(self._driver_record(attempt, HostPressure(str(exc)))), False
        except lost as exc:
            return NodeResult(self._lost_record(attempt, NodeLost(str(exc)))), True
        except exceptions.RayTaskError as exc:  # levelfield raised outside run_trial: our bug
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return NodeResult(self._driver_record(attempt, cause)), False
        except exceptions.RayError as exc:  # Ray itself failed the trial: the infrastructure's
            error = SandboxStartError(f"Ray: {type(exc).__name__}: {exc}")
            return NodeResult(self._driver_record(attempt, error)), False
        with contextlib.suppress(Exception):  # the worker returned: it will not claim again
            _ray_attempts.forget(attempt.token)
        if isinstance(result, Refused):
            refused = NodeLost(f"attempt refused on node {result.node}: {result.why}")
            record = self._driver_record(attempt, refused, node=result.node)
            note = "nothing of this attempt was created on its node"
            return NodeResult(_with_note(record, note)), True
        return result, False

    def _lost_record(self, attempt: _Attempt, exc: NodeLost) -> TrialRecord:
        """The token is revoked first: a worker that has not claimed it yet never will."""
        record = self._driver_record(attempt, exc)
        try:
            started = _ray_attempts.revoke(attempt.token)
        except Exception as error:  # the GCS itself failing: say so, the reap still runs
            return _with_note(record, f"attempt token not revoked: {error}")
        if started:
            note = "the attempt had started on the lost node: the run's next reap there removes it"
        else:
            note = "the attempt never started: its worker will refuse it"
        return _with_note(record, note)

    def _driver_record(
        self, attempt: _Attempt, exc: BaseException, node: str | None = None
    ) -> TrialRecord:
        """A record for an attempt that returned none: its clock runs from submission, since the
        worker's own start time died with it."""
        record = record_without_sandbox(attempt.trial, self.ctx, exc)
        host = record.telemetry.host.model_copy(update={"node": node or self._lost_node(exc)})
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
        check_room(self.ctx.run_dir)  # on the driver: the store and shipped logs live here
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
            # by the rules the trial's own logs were collected with: links the agent left stay
            # links (an absolute one would stop tarfile's "data" filter, and with it the sweep)
            extract(tar, dest, strip_first=False)

    def _cancel_pending(self) -> None:
        """Ctrl-C: cancelled trials get KeyboardInterrupt, close their sandboxes and are discarded
        (they rerun on resume); what a stuck one leaves is reaped by `_prepare_hosts`."""
        refs = list(self._pending)
        for ref, attempt in self._pending.items():
            with contextlib.suppress(Exception):
                _ray_attempts.revoke(attempt.token)  # one not yet begun never will
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
        with contextlib.suppress(Exception):
            self._ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
        self._pending.clear()

    def _prepare_hosts(self, where: NodeRun, store: Store, *, check: bool) -> None:
        """One `prepare_host` per machine that can run trials (not per Ray node: several nodes
        on one machine share its cgroups). A node that died since Ray listed it is skipped for
        another alive node of the same machine, so a lost node never stops its host's reap."""
        preps: list[HostPrep] = []
        for node_ids in _nodes_per_host(self._ray).values():
            prep = self._prepare_one_host(where, node_ids, check=check)
            if prep is not None:
                preps.append(prep)
                note_reaped(
                    store, host=prep.host, count=prep.reaped, when="start" if check else "end"
                )
        problems = [f"{prep.host}: {p}" for prep in preps for p in prep.problems]
        if problems:
            raise HostUnsupported("ray nodes cannot run trials: " + "; ".join(problems))

    def _prepare_one_host(
        self, where: NodeRun, node_ids: list[str], *, check: bool
    ) -> HostPrep | None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        exceptions = self._ray.exceptions
        for node_id in node_ids:
            ref = self._prepare_host.options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            ).remote(where, check=check)
            try:
                return self._ray.get(ref)  # type: ignore[no-any-return]
            except (exceptions.RayTaskError, exceptions.TaskCancelledError):
                raise
            except exceptions.RayError:
                continue  # that node died in between: the next one on the machine will do
        return None


def _with_note(record: TrialRecord, note: str) -> TrialRecord:
    evidence = record.evidence.model_copy(update={"notes": (*record.evidence.notes, note)})
    return record.model_copy(update={"evidence": evidence})


def _nodes_per_host(ray: ModuleType) -> dict[str, list[str]]:
    """Alive Ray nodes that can run trials, grouped by machine."""
    hosts: dict[str, list[str]] = {}
    for node in ray.nodes():
        if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0:
            hosts.setdefault(node.get("NodeManagerAddress"), []).append(node["NodeID"])
    return hosts


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
