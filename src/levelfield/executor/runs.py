"""Runs: dataset → plan → executor → store. The one entry point `run()` for the CLI and Python.

Order of a run: load and validate tasks; resolve and apply every policy to every task; open the
store (refusing a second live writer); check the backend on this host; reap whatever a killed
earlier invocation of this run left; plan, skip stored trials, execute; reap again at the end.
"""

from __future__ import annotations

import contextlib
import platform
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from levelfield._room import check_room
from levelfield.agents import AgentOptions, CheckingAgent, MountsAgent, make_agent
from levelfield.config import RunConfig
from levelfield.errors import (
    HostUnsupported,
    InputError,
    LevelfieldError,
    RunConfigError,
    RunDirFull,
)
from levelfield.executor._reaping import note_reaped
from levelfield.executor.local import Admission, LocalExecutor, OnTrial
from levelfield.executor.ray import RayExecutor, RetryPolicy, import_ray
from levelfield.harbor.task_features import without_refused
from levelfield.model_api.cost import PriceTable, PricingStore, load_prices
from levelfield.model_api.request_policy import RELAYED
from levelfield.network import IndexProber
from levelfield.plan import Trial, concurrency_blocks, estimate_duration_s, plan_trials
from levelfield.policy import Policy
from levelfield.records import ModelBudget, Reason, TrialRecord
from levelfield.runner import TrialContext
from levelfield.sandbox import (
    CAPABILITIES_DESCRIBED,
    Backend,
    BackendOptions,
    PreparingBackend,
    RoutingBackend,
    get_backend,
    trial_roots,
)
from levelfield.store import Store
from levelfield.tasks import Dataset, TaskProblem, load_dataset
from levelfield.telemetry import host_id, total_memory_bytes

PROBE_END_WAIT_S = 2.0  # a short run still records a probe of a fast index


@dataclass(frozen=True)
class PlanInfo:
    """What is about to run, printed before the first trial starts."""

    todo: list[Trial]
    already_stored: int
    seed: int
    window: str
    estimated_s: float
    measured: bool = False  # False: no stored trial to go by, the estimate is the timeouts' bound


@dataclass
class RunResult:
    run_dir: Path
    run_id: str
    planned: int
    already_stored: int
    executed: int
    task_problems: tuple[TaskProblem, ...] = ()
    plan: list[Trial] = field(default_factory=list)


def harness_version() -> str:
    try:
        return version("levelfield")
    except PackageNotFoundError:
        return "0+unknown"


def run(
    config: RunConfig,
    *,
    on_plan: Callable[[PlanInfo], None] | None = None,
    on_trial: OnTrial | None = None,
    trials: Sequence[Trial] | None = None,
) -> RunResult:
    """Run (or resume) the trials `config` describes, or the given `trials` of it (a round of an
    adaptive sweep). Safe to interrupt: call again to resume."""
    if config.executor == "ray":
        import_ray()  # a missing extra is refused before the store is touched
    dataset = _load(config)
    policies = config.resolved_policies()
    prices = load_prices(config.prices)
    config = config.model_copy(update={"agent_options": _with_budget_prices(config, prices)})
    trials = list(trials) if trials is not None else _plan(config, dataset, policies)
    on_this_host = config.executor == "local"  # Ray checks and reaps every node itself
    _refuse_unrunnable(config, dataset, on_this_host)  # before anything is stored
    run_dir = config.out.resolve()
    with Store.open_for_writing(run_dir) as store:
        trial_roots.mark(run_dir)  # its records and trials, hidden from other runs' sandboxes
        run_id = store.meta().get("run_id") or uuid.uuid4().hex[:12]
        options = BackendOptions(run_id, run_dir, config.uv_shim, config.image)
        backend = get_backend(config.backend, options)
        problems = backend.check() if on_this_host else []
        if problems:
            raise HostUnsupported(f"backend {config.backend}: " + "; ".join(problems))
        if isinstance(backend, PreparingBackend) and on_this_host:
            backend.prepare(dataset.tasks)  # auto: per-task backends; oci: pulls
        store.set_meta(_meta(config, run_id, backend, policies, store.meta()))
        if on_this_host:
            store.set_meta({"agents_prepared": _prepare_agents(config, store.meta())})
        store.set_meta({"skipped_tasks": _skipped(dataset)})
        stored = _settled_keys(store, RetryPolicy(config.node_lost_retries).max_attempts)
        todo = [t for t in trials if t.key not in stored]
        if todo:
            store.add_plan(config.window, config.seed, _now(), [t.key for t in trials])
        if on_plan:
            on_plan(_plan_info(todo, len(trials) - len(todo), config, store))
        ctx = TrialContext(run_id, run_dir, backend.name, agent_options=config.agent_options)
        ctx.prober = _prober(config) if todo else None
        routes = isinstance(backend, RoutingBackend)
        ctx.route = backend.name_for if routes else None  # auto: the backend each task got
        if on_this_host:
            note_reaped(store, host=platform.node(), count=backend.reap(run_id), when="start")
        try:
            check_room(run_dir)
            priced = PricingStore(store, prices, config.agent_options.model)
            executed = _execute_blocks(todo, backend, ctx, priced, config, on_trial)  # type: ignore[arg-type]
        finally:
            reaped = backend.reap(run_id) if on_this_host else 0
            with contextlib.suppress(RunDirFull):  # the error that stopped the run says so
                note_reaped(store, host=platform.node(), count=reaped, when="end")
                store.set_meta({"finished_at": _now(), **_probes_meta(ctx.prober, store.meta())})
    return RunResult(
        run_dir, run_id, len(trials), len(trials) - len(todo), executed, dataset.problems, todo
    )


def _with_budget_prices(config: RunConfig, prices: PriceTable) -> AgentOptions:
    """A cost ceiling is kept with the run's price table, which travels with the agents'
    options (to a Ray node too). Its model must be priced: refused now, not at every call."""
    options = config.agent_options
    if options.budget.max_cost_usd is None:
        return options
    if options.model and prices.price_of(options.model) is None:
        raise RunConfigError(
            f"--max-cost-per-trial: model {options.model!r} has no price in "
            f"{config.prices or 'the shipped prices.toml'}; add it with --prices"
        )
    return options.model_copy(update={"prices": prices})


def _prober(config: RunConfig) -> IndexProber | None:
    if config.index_probe_every_s <= 0:
        return None
    return IndexProber(every_s=config.index_probe_every_s, probe_file=config.index_probe_file)


def _probes_meta(prober: IndexProber | None, old: dict[str, Any]) -> dict[str, Any]:
    """Every probe of every invocation, for the report's host context; a probe still running
    at the end gets a moment to finish, never the full timeout."""
    if prober is None:
        return {}
    prober.wait(PROBE_END_WAIT_S)
    done = [p.model_dump(mode="json") for p in prober.results]
    return {"index_probes": [*old.get("index_probes", []), *done]} if done else {}


def _refuse_unrunnable(config: RunConfig, dataset: Dataset, on_this_host: bool) -> None:
    """A task that cannot run where it would be sent is refused now, not stored as a failure."""
    from levelfield.sandbox import auto

    if config.backend == "auto" and on_this_host:
        auto.refuse_unrunnable(dataset.tasks, uv_shim=config.uv_shim)
    elif config.backend == "process" and config.uv_shim:
        raise RunConfigError(auto.uv_shim_refusal([t.name for t in dataset.tasks]))


def _plan(config: RunConfig, dataset: Dataset, policies: list[Policy]) -> list[Trial]:
    agents = config.resolved_agents()
    for spec in agents:
        agent = make_agent(spec, config.agent_options)  # a misconfigured agent fails here
        if isinstance(agent, CheckingAgent):  # reads per-task inputs (population)
            agent.check(dataset.tasks)
    return plan_trials(
        dataset.tasks,
        agents,
        policies,
        repeats=config.repeats,
        window=config.window,
        seed=config.seed,
        concurrency_levels=config.concurrency_levels,
        disclosure_levels=config.disclosure_levels(),
    )


def _prepare_agents(config: RunConfig, meta: dict[str, Any]) -> dict[str, Any]:
    """Mounted CLI agents are prepared before the first trial (once per host, cached), and the
    run records what every trial will mount: path, version and content hash."""
    prepared = dict(meta.get("agents_prepared", {}))
    for spec in config.resolved_agents():
        agent = make_agent(spec, config.agent_options)
        if not isinstance(agent, MountsAgent) or not agent.mounts():
            continue
        from levelfield.agents.command import prepared_tree

        tree = prepared_tree(agent.preset, config.agent_options.agent_version)  # type: ignore[attr-defined]
        prepared[spec] = {
            "mode": "mounted",
            "package": tree.spec,
            "agent_version": tree.agent_version,
            "runtime": tree.runtime,
            "path": str(tree.path),
            "sha256": tree.sha256,
        }
    return prepared


def _plan_info(todo: list[Trial], stored: int, config: RunConfig, store: Store) -> PlanInfo:
    measured = _measured_durations(store)
    return PlanInfo(
        todo,
        stored,
        config.seed,
        config.window,
        estimate_duration_s(todo, config.concurrency, measured),
        measured=all(t.task.name in measured for t in todo),
    )


def _execute_blocks(
    todo: list[Trial],
    backend: Backend,
    ctx: TrialContext,
    store: Store,
    config: RunConfig,
    on_trial: OnTrial | None,
) -> int:
    executor = _executor(backend, ctx, config)
    executed = 0
    for level, block in concurrency_blocks(todo, config.concurrency):
        ctx.concurrency = level
        executed += executor(level).execute(block, store, on_trial)
    return executed


def _executor(
    backend: Backend, ctx: TrialContext, config: RunConfig
) -> Callable[[int], LocalExecutor | RayExecutor]:
    """The executor of a block at one concurrency level. On Ray the level caps trials in flight
    only when asked for (levels, or --concurrency above 1); otherwise the cluster decides."""
    if config.executor == "local":
        admission = Admission.for_this_host()
        return lambda level: LocalExecutor(backend, ctx, level, admission)
    ray = RayExecutor(
        ctx,
        address=config.ray_address,
        retry=RetryPolicy(config.node_lost_retries),
        scratch_dir=config.ray_scratch_dir,
    )
    capped = bool(config.concurrency_levels) or config.concurrency > 1

    def at(level: int) -> RayExecutor:
        ray.max_in_flight = level if capped else None
        return ray

    return at


def _settled_keys(store: Store, max_attempts: int) -> set[str]:
    """Keys whose last attempt is final. One lost with its node while retries are left is not:
    the driver died before the retry came back, so resume runs it as the next attempt."""
    last: dict[str, TrialRecord] = {}
    for record in store.records():
        if record.trial_key not in last or record.attempt > last[record.trial_key].attempt:
            last[record.trial_key] = record
    return {
        key
        for key, record in last.items()
        if record.reason is not Reason.NODE_LOST or record.attempt >= max_attempts
    }


def _skipped(dataset: Dataset) -> list[dict[str, str]]:
    """Tasks this invocation did not run, each with its problem: the run's record of them."""
    return [
        {"task": p.path.name, "path": str(p.path), "problem": p.message} for p in dataset.problems
    ]


def _measured_durations(store: Store) -> dict[str, float]:
    """Mean duration per task of the trials already stored: a better estimate than timeouts."""
    sums: dict[str, list[float]] = {}
    for record in store.records():
        sums.setdefault(record.task, []).append(record.duration_s)
    return {task: sum(v) / len(v) for task, v in sums.items()}


def _load(config: RunConfig) -> Dataset:
    dataset = load_dataset(config.dataset)
    if config.task_names:
        wanted = set(config.task_names)
        missing = wanted - {t.name for t in dataset.tasks}
        if missing:
            raise InputError(f"no such task in {config.dataset}: {', '.join(sorted(missing))}")
        dataset = Dataset(
            dataset.path, tuple(t for t in dataset.tasks if t.name in wanted), dataset.problems
        )
    dataset = without_refused(dataset, config.backend)  # Harbor features no backend runs
    if not dataset.tasks:
        detail = "; ".join(p.message for p in dataset.problems[:3])
        raise InputError(f"{config.dataset}: no valid task" + (f" ({detail})" if detail else ""))
    return dataset


def _meta(
    config: RunConfig, run_id: str, backend: Backend, policies: list[Policy], old: dict[str, Any]
) -> dict[str, Any]:
    described = dict(old.get("policies", {}))
    described.update({p.name: p.describe() for p in policies})
    budget = config.agent_options.budget
    stored = ModelBudget.model_validate(old.get("budget") or {})
    if "run_id" in old and stored != budget:
        raise RunConfigError(
            f"{config.out}: its trials ran under the model budget {stored.describe()}; a run "
            f"under {budget.describe()} is another configuration: give it its own --out"
        )
    return {
        "run_id": run_id,
        "harness_version": harness_version(),
        "created_at": old.get("created_at", _now()),
        "started_at": old.get("started_at", _now()),
        "dataset": str(config.dataset.resolve()),
        "backend": backend.name,
        "enforcement": _enforcement(backend),
        "capabilities": CAPABILITIES_DESCRIBED,
        "model_features": dict(RELAYED),
        "host": {
            "host_id": host_id(),
            "cpus": _cpus(),
            "memory_bytes": total_memory_bytes(),
            "kernel": platform.release(),
            "python": platform.python_version(),
        },
        "policies": described,
        "budget": budget.model_dump(),
        "concurrency": config.concurrency,
        "windows": sorted({*old.get("windows", []), config.window}),
    }


def _enforcement(backend: Backend) -> str:
    """A Ray driver may lack the cgroups its workers use; the run still says what it knows."""
    try:
        return backend.enforcement().describe()
    except LevelfieldError as exc:
        return f"as on each node (not readable on the driver: {exc})"


def _cpus() -> int:
    import os

    return os.cpu_count() or 1


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
