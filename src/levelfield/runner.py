"""One trial, phase by phase: limits → sandbox → agent → verifier → evidence → record.

`run_trial` never raises for the trial's own failure: a crashed trial is still a data point, and
the executor commits its record at once. Cancellation (KeyboardInterrupt, SystemExit) propagates;
the executor then discards the half-done trial, which reruns on resume.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from levelfield.agents import Agent, AgentOptions, AgentRun, make_agent
from levelfield.network import IndexProber
from levelfield.outcome import PhaseLog, classify, outcome_of
from levelfield.plan import Trial
from levelfield.policy import Limits
from levelfield.records import Evidence, HostContext, Telemetry, TrialRecord
from levelfield.sandbox import Backend, Sandbox
from levelfield.tasks import Task
from levelfield.telemetry import Sampler, TrialWatch, host_context
from levelfield.verifier import run_verifier

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
    trial_dir = _fresh_dir(ctx.trial_dir(trial))
    host = host_context(ctx.in_flight(), ctx.node)
    if ctx.prober is not None:
        host = host.model_copy(update={"index_probe": ctx.prober.latest()})
    watch = TrialWatch(admission_wait_s)
    started, t0 = datetime.now(UTC), time.monotonic()
    limits = trial.limits
    log, phase_s = PhaseLog(), {}
    sampler: Sampler | None = None
    try:
        agent = make_agent(trial.agent, ctx.agent_options, repeat=trial.repeat, window=trial.window)
        task = replace(trial.task, allow_internet=True) if agent.needs_network else trial.task
        box = backend.start(task, limits, trial_id=trial.key, trial_dir=trial_dir)
        phase_s["start"] = time.monotonic() - t0
        log.image = box.image
        ctx.track(box, alive=True)
        sampler = Sampler(box)
        with closing(box), sampler, watch.begin(box):
            try:
                _phases(trial, agent, box, trial_dir, log, phase_s, watch.mark)
            finally:
                log.evidence = box.evidence()  # the counters vanish with the cgroup
                watch.finish()
                box.collect_logs(trial_dir / "logs")
                ctx.track(box, alive=False)
    except Exception as exc:  # a harness bug is recorded too; cancellation propagates
        log.error = exc
        log.api_calls = log.api_calls or tuple(getattr(exc, "calls", ()))
    log.evidence = with_log_evidence(log)
    record = _record(trial, ctx, log, limits, host, sampler, phase_s, started, t0)
    record = record.model_copy(update={"telemetry": watch.add_to(record.telemetry)})
    (trial_dir / "record.json").write_text(record.model_dump_json(indent=2))
    return record


def _record(
    trial: Trial,
    ctx: TrialContext,
    log: PhaseLog,
    limits: Limits,
    host: HostContext,
    sampler: Sampler | None,
    phase_s: dict[str, float],
    started: datetime,
    t0: float,
) -> TrialRecord:
    reason = classify(log)
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
        outcome=outcome_of(reason),
        reason=reason,
        reward=log.reward,
        error=_error_text(log.error),
        limits=asdict(limits),
        agent_phase=log.agent,
        verifier_phase=log.verifier,
        evidence=log.evidence or Evidence(sandbox_alive=False),
        telemetry=Telemetry(
            host=host,
            samples=tuple(sampler.samples if sampler else ()),
            phase_s=phase_s,
            sample_every_s=sampler.every_s if sampler else 0.0,
        ),
        started_at=started.isoformat(timespec="milliseconds"),
        finished_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        duration_s=round(time.monotonic() - t0, 3),
        api_calls=log.api_calls,
        trajectory=log.trajectory,
        image=log.image,
    )


def record_without_sandbox(trial: Trial, ctx: TrialContext, exc: BaseException) -> TrialRecord:
    """A trial refused before any sandbox started (its floor can never be admitted)."""
    log = PhaseLog(error=exc)
    reason = classify(log)
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
        outcome=outcome_of(reason),
        reason=reason,
        error=_error_text(exc),
        limits=asdict(trial.limits),
        evidence=Evidence(sandbox_alive=False),
        telemetry=Telemetry(host=host_context(ctx.in_flight(), ctx.node)),
        started_at=now,
        finished_at=now,
        duration_s=0.0,
    )


ENOSPC_TEXT = "No space left on device"


def with_log_evidence(log: PhaseLog) -> Evidence | None:
    """A disk filled and emptied again between two samples still left its error in the output."""
    evidence = log.evidence
    if evidence is None or evidence.storage_full or evidence.storage_ceiling_bytes is None:
        return evidence
    tails = [p.output_tail for p in (log.agent, log.verifier) if p is not None]
    if not any(ENOSPC_TEXT in tail for tail in tails):
        return evidence
    note = f"'{ENOSPC_TEXT}' in the phase output under a storage ceiling"
    return evidence.model_copy(update={"storage_full": True, "notes": (*evidence.notes, note)})


def _phases(
    trial: Trial,
    agent: Agent,
    box: Sandbox,
    trial_dir: Path,
    log: PhaseLog,
    phase_s: dict[str, float],
    mark: Callable[[str], None] = lambda phase: None,
) -> None:
    mark("agent")
    t = time.monotonic()
    run = agent.run(box, trial.task, timeout_s=trial.task.agent_timeout_s, trial_dir=trial_dir)
    log.agent, log.api_calls, log.trajectory = run.phase, run.api_calls, run.drawn
    phase_s["agent"] = time.monotonic() - t
    _write_trajectory(trial, run, trial_dir)
    mark("verifier")
    t = time.monotonic()
    verdict = run_verifier(trial.task, box, trial_dir=trial_dir)
    log.verifier, log.reward = verdict.phase, verdict.reward
    phase_s["verifier"] = time.monotonic() - t


def _write_trajectory(trial: Trial, run: AgentRun, trial_dir: Path) -> None:
    """In the replay agent's input format, so this trial can be replayed under other policies."""
    doc: dict[str, object] = {
        "schema_version": 1,
        "task": trial.task.name,
        "agent": trial.agent,
        "policy": trial.policy.name,
    }
    if run.drawn is not None:
        doc["drawn"] = run.drawn
    doc["steps"] = list(run.steps)
    (trial_dir / "trajectory.json").write_text(json.dumps(doc, indent=2))


def _fresh_dir(path: Path) -> Path:
    """A half-done attempt from a killed run is discarded (its mounts were reaped at start)."""
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _error_text(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_CHARS]
