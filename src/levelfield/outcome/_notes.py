"""The words behind a verdict that no kernel counter gives, read from the same facts `classify`
reads: a setup's log tail, the file a verifier did not write, a timeout that left the result
unknown, a SIGKILL nothing explains, the model API or budget that stopped the agent."""

from __future__ import annotations

from levelfield.outcome._api import budget_call, refusals, stopping_call
from levelfield.outcome._log import PhaseLog
from levelfield.records import Evidence


def ungraded_after_timeout(log: PhaseLog) -> str | None:
    """Both facts behind an agent timeout that is not the verdict: the verifier runs after a
    timed-out agent too and can pass it, so when it then failed to grade, nobody knows the
    trial's result and the verdict is the verifier's (an infra error)."""
    agent, verifier = log.agent, log.verifier
    if agent is None or not agent.timed_out or log.grader_broken is not None:
        return None
    if verifier is not None and verifier.timed_out:
        what = f"timed out after {verifier.duration_s:.1f} s"
    elif log.reward is None:
        what = "wrote no reward"
    elif log.graded_nothing is not None and log.reward < 1.0:
        what = "graded nothing"
    else:
        return None
    return (
        f"the agent timed out after {agent.duration_s:.1f} s, then the verifier {what}: a "
        "timed-out agent can still pass its tests, so this trial's result is unknown"
    )


SIGKILL = 9


def unexplained_kill(log: PhaseLog) -> str | None:
    """A phase ended by SIGKILL that no OOM kill explains, said as such. The verdict stays the
    reward's: the agent may have sent it itself (`kill -9 -1`), which must not become an infra
    error; the kernel's OOM killer, the trial's or the host's, is in `oom_kills` when it acted."""
    evidence = log.evidence
    if evidence is None or evidence.oom_kills > 0 or evidence.host_oom_kills is None:
        return None  # no host reading (a remote engine): the sandbox says what it could not see
    phases = {"agent setup": log.setup.phase if log.setup else None}
    phases |= {"agent": log.agent, "verifier": log.verifier}
    killed = [
        name
        for name, phase in phases.items()
        if phase is not None and phase.signal == SIGKILL and not phase.timed_out
    ]
    if not killed:
        return None
    if evidence.host_oom_kills == 0:
        host = "the host's OOM killer did not act while it ran (/proc/vmstat oom_kill unchanged)"
    else:
        host = (
            f"the host's OOM killer killed {evidence.host_oom_kills} process(es) while it ran, "
            "none of this trial's by the kernel log"
        )
    return (
        f"the {' and '.join(killed)} phase ended by SIGKILL with no OOM kill in the trial's "
        f"cgroup, and {host}: unexplained (the agent itself, or a process outside the trial)"
    )


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
    if log.unbacked:
        notes.append(f"the tests' own record does not back the reward: {log.unbacked}")
    if log.grader_broken:
        notes.append(f"the grader could not run because of the agent: {log.grader_broken}")
    notes += filter(None, [ungraded_after_timeout(log), unexplained_kill(log)])
    if log.report is not None and log.report.api_failure:
        notes.append(f"the agent reported an API failure: {log.report.message}")
    notes += _budget_notes(log)
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


def _budget_notes(log: PhaseLog) -> list[str]:
    """The call the model budget refused last, with the spend it was refused at; and how many
    attempts the proxy refused as not model calls, with the first and last."""
    notes = []
    spent = budget_call(log.api_calls)
    if spent is not None:
        past = refusals(log.api_calls, "budget_exhausted")
        notes.append(
            f"the model budget stopped the agent: {past} call(s) refused past it, the last "
            f"({spent.method or 'POST'} {spent.endpoint or 'API'}): {spent.error}"
        )
    refused = [c for c in log.api_calls if c.outcome == "refused"]
    if refused:
        first, last = refused[0], refused[-1]
        notes.append(
            f"the model proxy refused {refusals(log.api_calls, 'refused')} attempt(s) that are "
            f"not model calls it carries, never relayed: first {first.method} {first.endpoint} "
            f"({first.error})"
            + (f"; last {last.method} {last.endpoint} ({last.error})" if len(refused) > 1 else "")
        )
    return notes
