"""One trial, phase by phase: limits → sandbox → agent → verifier → evidence → record.

`run_trial` never raises for the trial's own failure: a crashed trial is still a data point, and
the executor commits its record at once. Cancellation (KeyboardInterrupt, SystemExit) propagates;
the executor then discards the half-done trial, which reruns on resume.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from levelfield.agents import Agent, AgentOptions, AgentRun, MountsAgent, SetupAgent, make_agent
from levelfield.disclosure import DisclosedSandbox, disclosed_task
from levelfield.lifecycle import TrialLife
from levelfield.masking import Masker, known_secrets, secret_values_of
from levelfield.network import IndexProber
from levelfield.outcome import Decision, PhaseLog, decide
from levelfield.plan import Trial
from levelfield.records import (
    AgentSetup,
    Evidence,
    HostContext,
    ModelBudget,
    Telemetry,
    TrialRecord,
)
from levelfield.sandbox import Backend, Sandbox, scrub, trees
from levelfield.tasks import Task
from levelfield.telemetry import TrialWatch, host_context
from levelfield.verifier import GRADER_LOGS, LEFT_BY_AGENT, run_verifier

ERROR_TEXT_CHARS = 2000


@dataclass
class TrialContext:
    """What a trial needs from the run around it."""

    run_id: str
    run_dir: Path
    backend_name: str
    in_flight: Callable[[], int] = lambda: 1
    node: str | None = None
    concurrency: int = 1
    agent_options: AgentOptions = field(default_factory=AgentOptions)
    route: Callable[[Task], str] | None = None  # auto: the backend a task is sent to
    live: set[Sandbox] = field(default_factory=set)
    prober: IndexProber | None = None  # the run's package-index probe, recorded as host context
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def backend_for(self, task: Task) -> str:
        return self.route(task) if self.route is not None else self.backend_name

    def trial_dir(self, trial: Trial) -> Path:
        return (self.run_dir / "trials" / trial.key).resolve()

    def track(self, box: Sandbox, alive: bool) -> None:
        with self._lock:
            (self.live.add if alive else self.live.discard)(box)


def run_trial(
    trial: Trial, backend: Backend, ctx: TrialContext, *, admission_wait_s: float | None = None
) -> TrialRecord:
    """Secrets are masked as each log is written (the sandbox's pumps, the proxy's conversation,
    the trajectory), then in every file of the trial directory and in the record before the
    executor stores it (masking.py). The sandbox's life from start to record is the one every
    path shares (`lifecycle.py`); the phases and the verdict are this module's."""
    trial_dir = _fresh_dir(ctx.trial_dir(trial))
    host = host_context(ctx.in_flight(), ctx.node)
    if ctx.prober is not None:
        host = host.model_copy(update={"index_probe": ctx.prober.latest()})
    log = PhaseLog()
    life = TrialLife(
        trial.task,
        trial.limits,
        trial_id=trial.key,
        trial_dir=trial_dir,
        secrets=Masker(),
        watch=TrialWatch(admission_wait_s),
    )
    try:
        life.secrets = trial_secrets(ctx.agent_options)
        agent = make_agent(trial.agent, ctx.agent_options, repeat=trial.repeat, window=trial.window)
        life.task = replace(trial.task, allow_internet=True) if agent.needs_network else trial.task
        mounts = agent.mounts() if isinstance(agent, MountsAgent) else ()  # may prepare on host
        box = life.start(backend, mounts)
        log.image = box.image
        ctx.track(box, alive=True)
        try:
            _phases(trial, agent, box, trial_dir, log, life)
        finally:
            log.evidence = life.end(lambda box: _collect(box, trial_dir, log, ctx))
    except Exception as exc:  # a harness bug is recorded too; cancellation propagates
        log.error = exc
        log.api_calls = log.api_calls or tuple(getattr(exc, "calls", ()))
    life.mark("done")
    decision = decide(log)  # the one verdict function (outcome.py)
    log.evidence = decision.evidence
    if log.evidence is not None and (log.left_running or log.tampered or log.filled_beside):
        grader_facts = {
            "left_running": log.left_running,
            "tampered": log.tampered,
            "filled_beside": log.filled_beside,
        }
        log.evidence = log.evidence.model_copy(update=grader_facts)
    record = _record(trial, ctx, log, decision, life, host)
    scrub.mask_files(trial_dir, life.secrets)  # what the sandbox left under /logs, as it was
    return life.write(record, trial_dir)


def _collect(box: Sandbox, trial_dir: Path, log: PhaseLog, ctx: TrialContext) -> None:
    """Before the sandbox closes: its /logs, and the grader's beside them."""
    skipped = _collected(box, trial_dir / "logs")
    log.notes += tuple(f"not copied from /logs: {entry}" for entry in skipped)
    _place_grader_logs(trial_dir)
    ctx.track(box, alive=False)


def _collected(box: Sandbox, dest: Path) -> tuple[str, ...]:
    """What the agent left is evidence: a failure to collect it never decides the trial."""
    try:
        return box.collect_logs(dest)
    except Exception as exc:  # any: the grader's verdict stands
        return (f"the rest (collection stopped: {type(exc).__name__}: {exc})",)


def trial_secrets(options: AgentOptions) -> Masker:
    """Read where the trial runs (a Ray node too): secret values never travel with the trial."""
    key = options.api_key(options.api_key_env)
    extra = secret_values_of(options.agent_env)
    return known_secrets(key.get_secret_value() if key is not None else None, *extra)


def _record(
    trial: Trial,
    ctx: TrialContext,
    log: PhaseLog,
    decision: Decision,
    life: TrialLife,
    host: HostContext,
) -> TrialRecord:
    started, finished, duration_s = life.elapsed()
    return TrialRecord(
        trial_key=trial.key,
        run_id=ctx.run_id,
        task=trial.task.name,
        agent=trial.agent,
        policy=trial.policy.name,
        repeat=trial.repeat,
        window=trial.window,
        backend=ctx.backend_for(trial.task),
        concurrency=ctx.concurrency,
        outcome=decision.outcome,
        reason=decision.reason,
        reward=log.reward,
        error=_error_text(log.error),
        limits=asdict(trial.limits),
        agent_phase=log.agent,
        verifier_phase=log.verifier,
        evidence=log.evidence or Evidence(sandbox_alive=False),
        telemetry=life.telemetry(host),
        started_at=started,
        finished_at=finished,
        duration_s=duration_s,
        api_calls=log.api_calls,
        trajectory=log.trajectory,
        image=log.image,
        agent_setup=log.setup,
        agent_report=log.report,
        limits_disclosed=trial.limits_disclosed,
        budget=_budget(ctx),
    )


def _budget(ctx: TrialContext) -> ModelBudget | None:
    budget = ctx.agent_options.budget
    return budget if budget.is_set else None


def record_without_sandbox(trial: Trial, ctx: TrialContext, exc: BaseException) -> TrialRecord:
    """A trial refused before any sandbox started (its floor can never be admitted)."""
    decision = decide(PhaseLog(error=exc))
    reason = decision.reason
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    return TrialRecord(
        trial_key=trial.key,
        run_id=ctx.run_id,
        task=trial.task.name,
        agent=trial.agent,
        policy=trial.policy.name,
        repeat=trial.repeat,
        window=trial.window,
        backend=ctx.backend_for(trial.task),
        concurrency=ctx.concurrency,
        outcome=decision.outcome,
        reason=reason,
        error=_error_text(exc),
        limits=asdict(trial.limits),
        limits_disclosed=trial.limits_disclosed,
        budget=_budget(ctx),
        evidence=Evidence(sandbox_alive=False),
        telemetry=Telemetry(host=host_context(ctx.in_flight(), ctx.node)),
        started_at=now,
        finished_at=now,
        duration_s=0.0,
    )


def _phases(
    trial: Trial, agent: Agent, box: Sandbox, trial_dir: Path, log: PhaseLog, life: TrialLife
) -> None:
    """agent_setup (CLI agents) → agent → verifier. A failed setup ends the trial there: the
    agent never ran, so there is nothing to grade."""
    setup = _setup(trial, agent, box, trial_dir, log, life)
    if setup is not None and setup.failed:
        _write_trajectory(trial, None, trial_dir, box.secrets, setup)
        return
    task, agent_box = trial.task, box
    if trial.limits_disclosed:
        task, agent_box = disclosed_task(task, trial.limits), DisclosedSandbox(box, trial.limits)
    life.mark("agent")
    run = agent.run(agent_box, task, timeout_s=task.agent_timeout_s, trial_dir=trial_dir)
    log.agent, log.api_calls, log.report = run.phase, run.api_calls, run.report
    log.trajectory = run.drawn
    _write_trajectory(trial, run, trial_dir, box.secrets, setup)
    life.mark("verifier")
    verdict = run_verifier(trial.task, box, trial_dir=trial_dir)
    log.verifier, log.reward = verdict.phase, verdict.reward
    log.graded_nothing, log.grader_broken = verdict.graded_nothing, verdict.grader_broken
    log.unbacked = verdict.unbacked
    log.filled_beside = verdict.filled_beside
    log.tampered, log.notes = verdict.tampered, (*log.notes, *verdict.notes)
    log.left_running = verdict.left_running


def _setup(
    trial: Trial, agent: Agent, box: Sandbox, trial_dir: Path, log: PhaseLog, life: TrialLife
) -> AgentSetup | None:
    if not isinstance(agent, SetupAgent):
        return None
    life.mark("agent_setup", meter=False)  # the meter books an install to the start
    log.setup = agent.setup(box, trial.task, timeout_s=agent.setup_timeout_s, trial_dir=trial_dir)
    return log.setup


def _write_trajectory(
    trial: Trial,
    run: AgentRun | None,
    trial_dir: Path,
    masker: Masker,
    setup: AgentSetup | None = None,
) -> None:
    """In the replay agent's input format, so this trial can be replayed under other policies;
    the setup rides along under its own key, which a replay skips."""
    doc: dict[str, object] = {
        "schema_version": 1,
        "task": trial.task.name,
        "agent": trial.agent,
        "policy": trial.policy.name,
    }
    if run is not None and run.drawn is not None:
        doc["drawn"] = run.drawn
    if setup is not None:
        doc["setup"] = setup.model_dump(mode="json")
    doc["steps"] = list(run.steps) if run is not None else []
    (trial_dir / "trajectory.json").write_text(json.dumps(masker.value(doc), indent=2))


def _place_grader_logs(trial_dir: Path) -> None:
    """The grader's /logs/verifier becomes logs/verifier beside the agent's logs. Anything the
    agent's own processes wrote to their /logs/verifier meanwhile is kept aside, as before the
    grader began (the verifier's LEFT_BY_AGENT)."""
    graders = trial_dir / GRADER_LOGS
    if not graders.is_dir():
        return
    theirs = trial_dir / "logs" / "verifier"
    if theirs.is_dir() and not theirs.is_symlink() and any(theirs.iterdir()):
        theirs.rename(trial_dir / f"{LEFT_BY_AGENT}-while-grading")
    elif theirs.is_dir() and not theirs.is_symlink():
        theirs.rmdir()
    elif theirs.exists() or theirs.is_symlink():
        theirs.unlink()
    theirs.parent.mkdir(parents=True, exist_ok=True)
    graders.rename(theirs)


def _fresh_dir(path: Path) -> Path:
    """A half-done attempt from a killed run is discarded (its mounts were reaped at start)."""
    if path.exists():
        trees.remove_path(path)  # iterative: it may hold the agent's deepest folders
    path.mkdir(parents=True)
    return path


def _error_text(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_CHARS]
