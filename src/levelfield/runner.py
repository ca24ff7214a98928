"""One trial, phase by phase: limits → sandbox → agent → verifier → evidence → record.

`run_trial` never raises for the trial's own failure: a crashed trial is still a data point, and
the executor commits its record at once. Cancellation (KeyboardInterrupt, SystemExit) propagates;
the executor then discards the half-done trial, which reruns on resume.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from levelfield.agents import Agent, AgentOptions, AgentRun, make_agent
from levelfield.disclosure import DisclosedSandbox, disclosed_task
from levelfield.masking import Masker, known_secrets, secret_values_of
from levelfield.network import IndexProber
from levelfield.outcome import (
    PhaseLog,
    classify,
    outcome_of,
    stopping_call,
    unexplained_kill,
    ungraded_after_timeout,
)
from levelfield.plan import Trial
from levelfield.policy import Limits
from levelfield.records import AgentSetup, Evidence, HostContext, Telemetry, TrialRecord
from levelfield.sandbox import Backend, Sandbox, _scrub, _walk
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
    """Secrets are masked as each log is written (the sandbox's pumps, the proxy's conversation,
    the trajectory), then in every file of the trial directory and in the record before the
    executor stores it (masking.py)."""
    trial_dir = _fresh_dir(ctx.trial_dir(trial))
    host = host_context(ctx.in_flight(), ctx.node)
    if ctx.prober is not None:
        host = host.model_copy(update={"index_probe": ctx.prober.latest()})
    watch = TrialWatch(admission_wait_s)
    started, t0 = datetime.now(UTC), time.monotonic()
    limits = trial.limits
    log, phase_s = PhaseLog(), {}
    sampler: Sampler | None = None
    masker = Masker()
    try:
        masker = trial_secrets(ctx.agent_options)
        agent = make_agent(trial.agent, ctx.agent_options, repeat=trial.repeat, window=trial.window)
        task = replace(trial.task, allow_internet=True) if agent.needs_network else trial.task
        mounts = agent.mounts() if hasattr(agent, "mounts") else ()  # may prepare it on the host
        box = backend.start(
            task, limits, trial_id=trial.key, trial_dir=trial_dir, mounts=mounts, secrets=masker
        )
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
                skipped = _collected(box, trial_dir / "logs")
                log.notes += tuple(f"not copied from /logs: {entry}" for entry in skipped)
                ctx.track(box, alive=False)
    except Exception as exc:  # a harness bug is recorded too; cancellation propagates
        log.error = exc
        log.api_calls = log.api_calls or tuple(getattr(exc, "calls", ()))
    log.evidence = with_outcome_notes(with_log_evidence(log), log)
    record = _record(trial, ctx, log, limits, host, sampler, phase_s, started, t0)
    record = record.model_copy(update={"telemetry": watch.add_to(record.telemetry)})
    record = masker.record(record)
    _scrub.mask_files(trial_dir, masker)  # what the sandbox left under /logs, copied as it was
    (trial_dir / "record.json").write_text(record.model_dump_json(indent=2))
    return record


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
        agent_setup=log.setup,
        agent_report=log.report,
        limits_disclosed=trial.limits_disclosed,
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
        limits_disclosed=trial.limits_disclosed,
        evidence=Evidence(sandbox_alive=False),
        telemetry=Telemetry(host=host_context(ctx.in_flight(), ctx.node)),
        started_at=now,
        finished_at=now,
        duration_s=0.0,
    )


ENOSPC_TEXT = "No space left on device"
# A disk whose image holds all but this much of its ceiling may have been full between samples.
COULD_FILL_SLACK_BYTES = 4 << 20
COULD_FILL_SLACK_FRACTION = 0.10


def with_log_evidence(log: PhaseLog) -> Evidence | None:
    """A full disk is decided by the disks' own readings, never by what a phase printed. The
    sampler sees a disk that stayed full; a disk that filled and emptied between two samples
    still left its blocks in the disk's image (`storage_written_bytes`), and then the phase's
    "No space left on device" tells the two apart. Printed under a disk that never came near
    full, the words are the agent's own and change nothing: the evidence says so."""
    evidence = log.evidence
    if evidence is not None and evidence.host_disk_full and not evidence.storage_full:
        least = evidence.host_disk_free_min_bytes or 0
        note = (
            f"the host filesystem taking the trial's uncapped writes fell to {least >> 20} MiB "
            "free: the host's or the engine's disk ran out, not a ceiling of the trial's"
        )
        return evidence.model_copy(update={"notes": (*evidence.notes, note)})
    if evidence is None or evidence.storage_full:
        return evidence
    setup = log.setup.phase if log.setup is not None else None
    tails = [p.output_tail for p in (setup, log.agent, log.verifier) if p is not None]
    if not any(ENOSPC_TEXT in tail for tail in tails):
        return evidence
    ceiling, written = evidence.storage_ceiling_bytes, evidence.storage_written_bytes
    if ceiling is not None and written is not None and could_have_filled(written, ceiling):
        note = (
            f"'{ENOSPC_TEXT}' in the phase output, and the trial's disk held {written >> 20} "
            f"MiB of its {ceiling >> 20} MiB ceiling at some point: it filled between two samples"
        )
        return evidence.model_copy(update={"storage_full": True, "notes": (*evidence.notes, note)})
    return evidence.model_copy(update={"notes": (*evidence.notes, _no_full_disk(evidence))})


def could_have_filled(written_bytes: int, ceiling_bytes: int) -> bool:
    slack = max(COULD_FILL_SLACK_BYTES, COULD_FILL_SLACK_FRACTION * ceiling_bytes)
    return written_bytes >= ceiling_bytes - slack


def _no_full_disk(evidence: Evidence) -> str:
    seen = []
    if evidence.storage_ceiling_bytes is not None and evidence.storage_written_bytes is not None:
        seen.append(
            f"the trial's disk never held more than {evidence.storage_written_bytes >> 20} MiB "
            f"of its {evidence.storage_ceiling_bytes >> 20} MiB ceiling"
        )
    if evidence.host_disk_free_min_bytes is not None:
        seen.append(
            f"the host filesystem taking its uncapped writes kept at least "
            f"{evidence.host_disk_free_min_bytes >> 20} MiB free"
        )
    found = "; ".join(seen) or "no disk reading shows a full disk"
    return f"'{ENOSPC_TEXT}' in the phase output, but {found}: not a full disk"


SETUP_TAIL_CHARS = 800


def with_outcome_notes(evidence: Evidence | None, log: PhaseLog) -> Evidence | None:
    """The words behind an infra verdict that no kernel counter gives: a setup's log tail, the
    file a verifier did not write, the agent's own report of its API failing."""
    notes: list[str] = [*(f"the agent changed the grader: {t}" for t in log.tampered), *log.notes]
    if log.setup is not None and log.setup.failed and log.setup.phase is not None:
        phase = log.setup.phase
        how = "timed out" if phase.timed_out else f"exited {phase.exit_code}"
        notes.append(f"agent setup {how}: {phase.output_tail[-SETUP_TAIL_CHARS:]}")
    if log.graded_nothing:
        notes.append(f"verifier graded nothing: {log.graded_nothing}")
    if log.grader_broken:
        notes.append(f"the grader could not run because of the agent: {log.grader_broken}")
    notes += filter(None, [ungraded_after_timeout(log), unexplained_kill(log)])
    if log.report is not None and log.report.api_failure:
        notes.append(f"the agent reported an API failure: {log.report.message}")
    stopped = stopping_call(log.api_calls)
    if stopped is not None:
        failed = sum(1 for call in log.api_calls if call.outcome != "ok")
        said = f": {stopped.error}" if stopped.error else ""
        notes.append(
            f"the model API stopped the agent: its last call ({stopped.endpoint or 'API'}, "
            f"attempt {stopped.attempt}) was answered {stopped.status or 'nothing'} "
            f"({stopped.outcome}{said}); {failed} of {len(log.api_calls)} calls failed"
        )
    if evidence is None or not notes:
        return evidence
    return evidence.model_copy(update={"notes": (*evidence.notes, *notes)})


def _phases(
    trial: Trial,
    agent: Agent,
    box: Sandbox,
    trial_dir: Path,
    log: PhaseLog,
    phase_s: dict[str, float],
    mark: Callable[[str], None] = lambda phase: None,
) -> None:
    """agent_setup (CLI agents) → agent → verifier. A failed setup ends the trial there: the
    agent never ran, so there is nothing to grade."""
    setup = _setup(trial, agent, box, trial_dir, log, phase_s)
    if setup is not None and setup.failed:
        _write_trajectory(trial, None, trial_dir, box.secrets, setup)
        return
    task, agent_box = trial.task, box
    if trial.limits_disclosed:
        task, agent_box = disclosed_task(task, trial.limits), DisclosedSandbox(box, trial.limits)
    mark("agent")
    t = time.monotonic()
    run = agent.run(agent_box, task, timeout_s=task.agent_timeout_s, trial_dir=trial_dir)
    log.agent, log.api_calls, log.report = run.phase, run.api_calls, run.report
    log.trajectory = run.drawn
    phase_s["agent"] = time.monotonic() - t
    _write_trajectory(trial, run, trial_dir, box.secrets, setup)
    mark("verifier")
    t = time.monotonic()
    verdict = run_verifier(trial.task, box, trial_dir=trial_dir)
    log.verifier, log.reward = verdict.phase, verdict.reward
    log.graded_nothing, log.grader_broken = verdict.graded_nothing, verdict.grader_broken
    log.tampered, log.notes = verdict.tampered, (*log.notes, *verdict.notes)
    phase_s["verifier"] = time.monotonic() - t


def _setup(
    trial: Trial,
    agent: Agent,
    box: Sandbox,
    trial_dir: Path,
    log: PhaseLog,
    phase_s: dict[str, float],
) -> AgentSetup | None:
    if not hasattr(agent, "setup"):
        return None
    t = time.monotonic()
    timeout_s = getattr(getattr(agent, "options", None), "setup_timeout_s", 600.0)
    log.setup = agent.setup(box, trial.task, timeout_s=timeout_s, trial_dir=trial_dir)
    phase_s["agent_setup"] = time.monotonic() - t
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


def _fresh_dir(path: Path) -> Path:
    """A half-done attempt from a killed run is discarded (its mounts were reaped at start)."""
    if path.exists():
        _walk.remove_path(path)  # iterative: it may hold the agent's deepest folders
    path.mkdir(parents=True)
    return path


def _error_text(exc: BaseException | None) -> str | None:
    if exc is None:
        return None
    return f"{type(exc).__name__}: {exc}"[:ERROR_TEXT_CHARS]
