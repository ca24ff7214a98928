"""The Ray executor on a real multi-node cluster on this machine (`ray.cluster_utils.Cluster`):
floors become Ray resources, so no node ever holds more trials than its CPUs and memory admit;
a node removed mid-trial gives `infra_error/node_lost`, then a retry elsewhere, both stored; and
the store holds what the local executor writes for the same plan.

Cluster: a head with no CPU (the driver's node, so no trial runs there) and two workers. Tasks
have a 0.5-CPU, 64 MiB floor: `wide` (1 CPU, 1 GiB) admits two at once by CPU, `narrow`
(1 CPU, 100 MiB) admits one by memory.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from levelfield.agents import AgentOptions
from levelfield.errors import RunConfigError
from levelfield.executor import _ray_attempts
from levelfield.executor._ray_node import NodeRun, Refused, run_on_node
from levelfield.executor.local import Admission, LocalExecutor
from levelfield.executor.ray import IN_FLIGHT_ROOT, RayExecutor
from levelfield.plan import Trial, plan_trials
from levelfield.policy import resolve_policy
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.runner import TrialContext
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.store import Store, reading
from levelfield.tasks import load_dataset

from ..conftest import MakeTask, require
from ._helpers import leftovers

pytestmark = [pytest.mark.ray, pytest.mark.sandbox, pytest.mark.slow]

GIB, MIB = 1 << 30, 1 << 20
SLEEPY = "sleep {s}; touch /app/done"
ALLOC_THEN_MARK = 'python3 -c \'b = b"x" * (128 << 20); open("/app/done", "w").write("ok")\''


@dataclass
class Nodes:
    cluster: Any
    ids: dict[str, str]  # name → Ray node id

    def name_of(self, record: TrialRecord) -> str:
        node = record.telemetry.host.node or ""
        return next(name for name, nid in self.ids.items() if node.endswith(nid[:12]))


@pytest.fixture(scope="module")
def nodes() -> Iterator[Nodes]:
    require(
        [] if importlib.util.find_spec("ray") else ["ray (pip install 'levelfield[ray]')"],
        "the Ray executor",
    )
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    wide = cluster.add_node(num_cpus=1, memory=GIB)
    narrow = cluster.add_node(num_cpus=1, memory=100 * MIB)
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield Nodes(cluster, {"wide": wide.node_id, "narrow": narrow.node_id})
    finally:
        ray.shutdown()
        cluster.shutdown()


def _plan(dataset: Path, policies: Sequence[str] = ("strict",), repeats: int = 1) -> list[Trial]:
    tasks = load_dataset(dataset).tasks
    return plan_trials(tasks, ["oracle"], [resolve_policy(p) for p in policies], repeats=repeats)


def _execute(
    executor: RayExecutor | LocalExecutor, trials: list[Trial], run_dir: Path
) -> list[TrialRecord]:
    """Every Ray run of this module ends with a check that nothing of it is left on the host
    (the local executor leaves its run's reap to `run()`, which these tests bypass)."""
    with Store.open_for_writing(run_dir) as store:
        executor.execute(trials, store)
    with reading(run_dir) as store:
        records = list(store.records())
    if isinstance(executor, RayExecutor):
        left = leftovers(executor.ctx.run_id, run_dir)
        assert left == [], f"left behind by {executor.ctx.run_id}: {left}"
    return records


def _ray_executor(run_dir: Path, **options: Any) -> RayExecutor:
    return RayExecutor(TrialContext("ray-" + run_dir.name, run_dir, "process"), **options)


def _max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    events = sorted(
        [(s, 1) for s, _ in intervals] + [(f, -1) for _, f in intervals], key=lambda e: (e[0], e[1])
    )  # a finish before a start at the same instant
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def _in_flight_maxima(records: list[TrialRecord], nodes: Nodes) -> dict[str, int]:
    """From the records' own clocks: how many trials overlapped on each node at worst."""
    per_node: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for r in records:
        if r.reason is not Reason.NODE_LOST:  # its clock is the driver's, from submission
            interval = (datetime.fromisoformat(r.started_at), datetime.fromisoformat(r.finished_at))
            per_node[nodes.name_of(r)].append(interval)
    return {name: _max_overlap(intervals) for name, intervals in per_node.items()}


def test_every_trial_runs_once_and_no_node_holds_more_than_its_floors_admit(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        root = make_task(name, solve=SLEEPY.format(s=1.5), cpus=0.5, memory_mb=64)
    trials = _plan(root.parent, repeats=3)
    records = _execute(_ray_executor(tmp_path / "run"), trials, tmp_path / "run")

    assert sorted(r.trial_key for r in records) == sorted(t.key for t in trials)  # 9, once each
    assert {(r.outcome, r.reason, r.attempt) for r in records} == {
        (Outcome.PASSED, Reason.TESTS_PASSED, 1)
    }
    maxima = _in_flight_maxima(records, nodes)
    print(f"\n{len(records)} trials; in flight at most per node: {maxima}")
    assert set(maxima) == {"wide", "narrow"}  # never the CPU-less head
    assert maxima["wide"] == 2  # 2 × 0.5 CPU: the CPU floor is what limits it
    assert maxima["narrow"] == 1  # 100 MiB holds one 64 MiB floor
    capacity = {"wide": 2, "narrow": 1}
    assert all(r.telemetry.host.trials_in_flight <= capacity[nodes.name_of(r)] for r in records)
    assert all(r.concurrency == 2 for r in records)  # uncapped: the cluster's 2 CPUs


def test_store_equals_what_the_local_executor_writes_for_the_same_plan(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("passes", cpus=0.5)
    make_task("fails", solve="true", cpus=0.5)
    root = make_task("spike", solve=ALLOC_THEN_MARK, cpus=0.5)  # OOM under strict only
    trials = _plan(root.parent, policies=("strict", "uncapped"))

    local_dir, ray_dir = tmp_path / "local", tmp_path / "ray"
    backend = get_backend("process", BackendOptions("local-" + local_dir.name, local_dir))
    local = LocalExecutor(
        backend,
        TrialContext("local-" + local_dir.name, local_dir, "process"),
        concurrency=2,
        admission=Admission(2, 8 * GIB),
    )
    try:
        by_local = _execute(local, trials, local_dir)
    finally:  # what `levelfield run` does after its executor: the run's own cgroup goes too
        backend.reap("local-" + local_dir.name)
    by_ray = _execute(_ray_executor(ray_dir), trials, ray_dir)

    def table(records: list[TrialRecord]) -> dict[str, tuple[str, str, str, int]]:
        return {r.trial_key: (r.task, r.outcome.value, r.reason.value, r.attempt) for r in records}

    assert table(by_ray) == table(by_local)
    assert len(table(by_ray)) == 6
    assert {v[1:3] for v in table(by_ray).values()} == {
        ("passed", "tests_passed"),
        ("failed", "tests_failed"),
        ("infra_error", "oom_killed"),
    }
    spike = next(r for r in by_ray if r.reason is Reason.OOM_KILLED)
    assert spike.evidence.oom_kills >= 1  # the ceiling was enforced on the worker
    assert all((ray_dir / "trials" / r.trial_key / "record.json").is_file() for r in by_ray)


def _wait_for_trial_on(run_id: str, node_id: str, timeout_s: float = 60) -> bool:
    markers = IN_FLIGHT_ROOT / run_id / node_id
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if any(markers.iterdir()):
                return True
        time.sleep(0.1)
    return False


def _remove_mid_run(
    nodes: Nodes, doomed: Any, executor: RayExecutor, trials: list[Trial], run_dir: Path
) -> list[TrialRecord]:
    """Runs the sweep in a driver thread and kills `doomed` once a trial runs there."""
    outcome: dict[str, Any] = {}
    driver = threading.Thread(
        target=lambda: outcome.update(records=_execute(executor, trials, run_dir))
    )
    driver.start()
    try:
        assert _wait_for_trial_on(executor.ctx.run_id, doomed.node_id), "no trial on the node"
        nodes.cluster.remove_node(doomed, allow_graceful=False)
    finally:
        driver.join(timeout=120)
    return outcome["records"]


def test_a_node_removed_mid_trial_gives_node_lost_then_a_retry_elsewhere(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    doomed = nodes.cluster.add_node(num_cpus=1, memory=100 * MIB)  # one trial at a time
    nodes.cluster.wait_for_nodes()
    nodes.ids["doomed"] = doomed.node_id
    for name in ("a", "b", "c"):
        root = make_task(name, solve=SLEEPY.format(s=4), cpus=0.5, memory_mb=64)
    trials = _plan(root.parent, repeats=2)
    executor = _ray_executor(tmp_path / "run")
    records = _remove_mid_run(nodes, doomed, executor, trials, tmp_path / "run")

    lost = [r for r in records if r.reason is Reason.NODE_LOST]
    print(
        f"\n{len(records)} records for {len(trials)} trials; node_lost: {len(lost)}",
        [(r.attempt, r.telemetry.host.node, (r.error or "")[:60]) for r in lost],
    )
    assert len(lost) >= 1
    attempts = defaultdict(list)
    for r in sorted(records, key=lambda r: r.attempt):
        attempts[r.trial_key].append(r)
    assert set(attempts) == {t.key for t in trials}
    for first, *retries in attempts.values():
        if first.reason is not Reason.NODE_LOST:
            assert retries == [] and first.outcome is Outcome.PASSED
            continue
        assert (first.attempt, first.outcome, nodes.name_of(first)) == (
            1,
            Outcome.INFRA_ERROR,
            "doomed",
        )
        (second,) = retries
        assert (second.attempt, second.reason) == (2, Reason.TESTS_PASSED)
        assert nodes.name_of(second) != "doomed"
    assert _in_flight_maxima(records, nodes).get("doomed", 0) <= 1
    for r in lost:  # the driver says whether the lost attempt had begun on its node
        assert any("attempt" in note for note in r.evidence.notes), r.evidence.notes
    with reading(tmp_path / "run") as store:
        print("reaped:", store.meta().get("reaped", []))


def test_an_attempt_the_driver_gave_up_is_refused_before_anything_is_created(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    """The late start the driver cannot see: its worker meets a revoked token and creates no
    trial directory, cgroup or disk; an attempt whose token is intact runs."""
    import ray

    root = make_task("late", cpus=0.5)
    (trial,) = _plan(root.parent)
    run_dir, run_id = tmp_path / "run", f"ray-late-{os.getpid()}"
    where = NodeRun("process", run_id, run_dir.resolve(), False, 1, AgentOptions())
    prefix = _ray_attempts.execution_prefix(run_id)
    given_up, wanted = (_ray_attempts.attempt_token(prefix, trial.key, n) for n in (1, 2))
    assert _ray_attempts.revoke(given_up) is False  # no worker had claimed it
    remote = ray.remote(run_on_node).options(num_cpus=0.5, max_retries=0)

    refused = ray.get(remote.remote(trial, 1, where, given_up))
    assert isinstance(refused, Refused) and "given this attempt up" in refused.why
    assert not (run_dir / "trials").exists()
    assert leftovers(run_id, run_dir) == []

    ran = ray.get(remote.remote(trial, 2, where, wanted))
    assert ran.record.outcome is Outcome.PASSED
    assert _ray_attempts.revoke(wanted) is True  # the worker had claimed it
    get_backend("process", BackendOptions(run_id, run_dir)).reap(run_id)  # the run's own cgroup
    assert leftovers(run_id, run_dir) == []


def test_a_stored_node_lost_attempt_is_retried_as_attempt_2_on_resume(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    """The driver died after storing attempt 1 (node_lost) but before the retry came back."""
    root = make_task("a", cpus=0.5)
    (trial,) = _plan(root.parent)
    first = _execute(_ray_executor(tmp_path / "first"), [trial], tmp_path / "first")[0]
    run_dir = tmp_path / "run"
    lost = first.model_copy(update={"reason": Reason.NODE_LOST, "outcome": Outcome.INFRA_ERROR})
    with Store.open_for_writing(run_dir) as store:
        store.commit(lost)
    records = _execute(_ray_executor(run_dir), [trial], run_dir)
    assert sorted((r.attempt, r.reason) for r in records) == [
        (1, Reason.NODE_LOST),
        (2, Reason.TESTS_PASSED),
    ]
    assert (run_dir / "trials" / f"{trial.key}.attempt-2" / "record.json").is_file()


def test_scratch_dir_brings_the_trial_directory_back_to_the_driver(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    root = make_task("a", cpus=0.5)
    trials = _plan(root.parent)
    run_dir, scratch = tmp_path / "run", tmp_path / "node-scratch"
    (record,) = _execute(_ray_executor(run_dir, scratch_dir=scratch), trials, run_dir)
    assert record.outcome is Outcome.PASSED
    shipped = run_dir / "trials" / record.trial_key
    assert (shipped / "record.json").is_file() and (shipped / "logs").is_dir()
    assert not (scratch / "ray-run" / "trials" / record.trial_key).exists()  # removed once shipped


def test_without_ray_choosing_the_executor_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets when it is absent
    with pytest.raises(RunConfigError, match=r"pip install 'levelfield\[ray\]'"):
        _ray_executor(tmp_path)


def test_what_an_agent_leaves_under_logs_never_stops_a_shipped_sweep(
    nodes: Nodes, make_task: MakeTask, tmp_path: Path
) -> None:
    """A FIFO, a socket and absolute links under /logs: the trial still passes, the links come
    back to the driver as links (tarfile's "data" filter would refuse them and end the sweep),
    and what was left behind is in the evidence."""
    leave = (
        "mkfifo /logs/agent/fifo; ln -s /etc/shadow /logs/agent/shadow; "
        "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/logs/agent/sock\")'; "
        "touch /app/done"
    )
    root = make_task("a", solve=leave, cpus=0.5)
    run_dir, scratch = tmp_path / "run", tmp_path / "node-scratch"
    (record,) = _execute(_ray_executor(run_dir, scratch_dir=scratch), _plan(root.parent), run_dir)
    assert record.outcome is Outcome.PASSED
    shipped = run_dir / "trials" / record.trial_key / "logs" / "agent"
    assert os.readlink(shipped / "shadow") == "/etc/shadow"
    assert not (shipped / "fifo").exists() and not (shipped / "sock").exists()
    assert any("agent/fifo (a fifo" in note for note in record.evidence.notes)
