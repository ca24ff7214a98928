"""Evidence → outcome: the one table from reason to outcome, and `decide()`, the one verdict
function every path calls with the same facts (`PhaseLog`): the native runner at a trial's end,
a hosted sandbox after each exec (which ceiling the kernel enforced), and an import of another
harness's trials. The rules it applies live beside the table, once: whether a disk filled
(`_disk`), whether a grader graded anything or the agent broke it (`_grading`), what an exception
another harness stored means (`_imported`), whose failure a model call's end is (`_api`), and
the words behind a verdict (`_notes`).

Kernel counters outrank exit codes and exceptions: under cgroup v1 an OOM kill shows only as an
exit by SIGKILL (137) and podman even reports OOMKilled=false, so the cgroup's own counter decides.
Errors are looked up along `type(exc).__mro__`, so renaming a subclass cannot change a verdict,
and an error nobody listed is a `harness_error` (our bug), never the agent's failure.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Final

from levelfield import errors
from levelfield.outcome._api import (
    AGENTS_OWN_OUTCOMES,
    API_STOP_OUTCOMES,
    AUTH_STATUSES,
    REFUSAL_RUN,
    budget_call,
    is_api_failure,
    outcome_for_status,
    refusals,
    stopping_call,
)
from levelfield.outcome._disk import ENOSPC_TEXT, could_have_filled, with_log_evidence
from levelfield.outcome._grading import (
    graded_nothing,
    grader_broken,
    named_reports,
    runner_started,
    unbacked,
)
from levelfield.outcome._imported import (
    IMPORTED_NOTE,
    RULES,
    Rule,
    imported_reason,
    levelfield_error,
    rule_for,
)
from levelfield.outcome._log import Imported, PhaseLog
from levelfield.outcome._notes import (
    SIGKILL,
    unexplained_kill,
    ungraded_after_timeout,
    with_outcome_notes,
)
from levelfield.records import Evidence, Outcome, Reason

__all__ = [
    "AGENTS_OWN_OUTCOMES", "API_STOP_OUTCOMES", "AUTH_STATUSES", "ENOSPC_TEXT", "IMPORTED_NOTE",
    "OUTCOME_OF", "REASON_OF_ERROR", "REFUSAL_RUN", "RULES", "SIGKILL", "Decision", "Imported",
    "PhaseLog", "Rule", "budget_call", "classify", "could_have_filled", "decide",
    "graded_nothing", "grader_broken", "is_api_failure", "levelfield_error", "levelfield_reason",
    "named_reports", "outcome_for_status", "outcome_of", "reason_for_error", "reason_for_reward",
    "reason_from_evidence", "refusals", "rule_for", "runner_started", "stopping_call",
    "unbacked", "unexplained_kill", "ungraded_after_timeout", "with_log_evidence",
    "with_outcome_notes",
]  # fmt: skip

OUTCOME_OF: Final = MappingProxyType(
    {
        Reason.TESTS_PASSED: Outcome.PASSED,
        Reason.TESTS_FAILED: Outcome.FAILED,
        Reason.AGENT_TIMEOUT: Outcome.FAILED,  # the agent's budget is part of the task
        Reason.AGENT_ERROR: Outcome.FAILED,
        Reason.OOM_KILLED: Outcome.INFRA_ERROR,  # the ceiling, not the agent, ended it
        Reason.PIDS_EXHAUSTED: Outcome.INFRA_ERROR,
        Reason.STORAGE_EXHAUSTED: Outcome.INFRA_ERROR,
        Reason.VERIFIER_TIMEOUT: Outcome.INFRA_ERROR,  # the grader failed to grade
        Reason.VERIFIER_ERROR: Outcome.INFRA_ERROR,  # test.sh wrote no reward, or graded nothing
        Reason.GRADER_BROKEN: Outcome.FAILED,  # the agent's changes broke it (dpkg, python3, pip)
        Reason.AGENT_SETUP_FAILED: Outcome.INFRA_ERROR,  # the agent never ran
        Reason.SANDBOX_ERROR: Outcome.INFRA_ERROR,
        Reason.HOST_PRESSURE: Outcome.INFRA_ERROR,
        Reason.NODE_LOST: Outcome.INFRA_ERROR,
        Reason.API_ERROR: Outcome.INFRA_ERROR,
        Reason.HARNESS_ERROR: Outcome.INFRA_ERROR,
        Reason.GRADER_TAMPERED: Outcome.FAILED,  # the agent changed /tests or the reward's place
        Reason.BUDGET_EXHAUSTED: Outcome.FAILED,  # it spent its model budget and did not finish
    }
)

REASON_OF_ERROR: Final = MappingProxyType(
    {
        errors.AdmissionError: Reason.SANDBOX_ERROR,
        errors.NodeLost: Reason.NODE_LOST,
        errors.HostPressure: Reason.HOST_PRESSURE,
        errors.LevelfieldOOMKilled: Reason.OOM_KILLED,
        errors.LevelfieldPidsExhausted: Reason.PIDS_EXHAUSTED,
        errors.LevelfieldStorageExhausted: Reason.STORAGE_EXHAUSTED,
        errors.SandboxError: Reason.SANDBOX_ERROR,
        errors.AgentError: Reason.AGENT_ERROR,
        errors.ApiError: Reason.API_ERROR,
        errors.AgentSetupError: Reason.AGENT_SETUP_FAILED,
        errors.InputError: Reason.HARNESS_ERROR,  # should have been refused before the run
        errors.RunDirFull: Reason.HARNESS_ERROR,  # stops the run; never stored as a trial
        errors.StoreError: Reason.HARNESS_ERROR,
        errors.LevelfieldError: Reason.HARNESS_ERROR,
    }
)


def reason_for_error(exc: BaseException) -> Reason:
    for cls in type(exc).__mro__:
        if cls in REASON_OF_ERROR:
            return REASON_OF_ERROR[cls]
    return Reason.HARNESS_ERROR


def reason_for_reward(reward: float | None) -> Reason:
    if reward is None:
        return Reason.VERIFIER_ERROR
    return Reason.TESTS_PASSED if reward >= 1.0 else Reason.TESTS_FAILED


def reason_from_evidence(evidence: Evidence | None) -> Reason | None:
    """A ceiling the kernel enforced, whichever phase hit it and whatever the scripts said."""
    if evidence is None:
        return None
    if evidence.oom_kills > evidence.outside_oom_kills:
        return Reason.OOM_KILLED  # at the trial's own ceiling
    if evidence.outside_oom_kills > 0:
        return Reason.HOST_PRESSURE  # the host's OOM killer, or a parent cgroup's limit
    if evidence.pids_max_hits > 0:
        return Reason.PIDS_EXHAUSTED
    if evidence.storage_full:
        return Reason.STORAGE_EXHAUSTED
    if evidence.host_disk_full:
        return Reason.HOST_PRESSURE  # the host's or the engine's disk, with no ceiling of its own
    return None


def classify(log: PhaseLog) -> Reason:
    """Kernel evidence, then the harness's own errors, then a setup that failed, then a model
    API that stopped the agent (its last call through the proxy failed, or the CLI itself said
    so), then a grader the agent broke, then a grader that timed out, graded nothing or wrote
    no reward (even after an agent timeout: `ungraded_after_timeout`), then a model budget the
    agent spent, then an agent timeout, then the reward.

    A spent budget is the agent's like a timeout, and like one it decides only a trial that did
    not pass and whose grader graded: the agent may have finished before it ran out. Once it
    is spent, what the CLI then says of its API (the refusal it got) is not an outage.

    A ceiling hit only decides when the trial did not pass: an agent that ran into its pids
    ceiling once, recovered and passed the tests has passed. A grader the agent changed
    outranks everything: its reward means nothing, and nothing else can excuse the change.

    A reward the tests' own record contradicts is no pass, and a grader that ended from inside
    once the tests had started (its report or reward never written) is the agent's failure:
    the code under test runs there. A reward that stands on no test at all (the bootstrap
    never got the tests started) is no pass either, and is the verifier's.
    """
    if log.tampered:
        return Reason.GRADER_TAMPERED
    kernel = reason_from_evidence(log.evidence)
    beside = log.filled_beside or (log.evidence.filled_beside if log.evidence else None)
    if kernel is Reason.STORAGE_EXHAUSTED and beside is not None:
        kernel = None  # the agent's processes, writing while the grader ran, may have filled it
    passed = (
        log.error is None
        and reason_for_reward(log.reward) is Reason.TESTS_PASSED
        and log.unbacked is None
        and log.graded_nothing is None
    )
    if kernel is not None and not passed:
        return kernel
    if log.error is not None:
        return reason_for_error(log.error)
    if log.imported is not None:
        return _imported(log)[0]
    if log.setup is not None and log.setup.failed:
        return Reason.AGENT_SETUP_FAILED
    spent = budget_call(log.api_calls) is not None
    if stopping_call(log.api_calls) is not None and not passed and not spent:
        return Reason.API_ERROR  # also when the CLI then waited out its timeout in backoff
    if log.report is not None and log.report.api_failure and not passed and not spent:
        return Reason.API_ERROR  # what an unproxied CLI said of its API, even in backoff
    if log.grader_broken is not None and not passed:
        return Reason.GRADER_BROKEN  # the agent's own changes left the grader unable to run
    if log.verifier is not None and log.verifier.timed_out:
        return Reason.VERIFIER_TIMEOUT
    if log.unbacked is not None:
        return Reason.TESTS_FAILED  # ended from inside, or a pass its report denies
    if log.graded_nothing is not None:
        return Reason.VERIFIER_ERROR
    if log.reward is None:
        return Reason.VERIFIER_ERROR  # a timed-out agent too: its verifier could have passed it
    if spent and not passed:
        return Reason.BUDGET_EXHAUSTED  # also when the CLI then waited out its timeout
    if log.agent is not None and log.agent.timed_out and not passed:
        return Reason.AGENT_TIMEOUT
    return reason_for_reward(log.reward)


def outcome_of(reason: Reason) -> Outcome:
    return OUTCOME_OF[reason]


_FAILED: Final = {reason for reason, outcome in OUTCOME_OF.items() if outcome is Outcome.FAILED}


@dataclass(frozen=True, slots=True)
class Decision:
    """A trial's verdict: its reason, the outcome the table gives it, the evidence with the words
    that back it (None where the path had no evidence), and those words alone."""

    reason: Reason
    outcome: Outcome
    evidence: Evidence | None
    notes: tuple[str, ...] = ()


def decide(log: PhaseLog) -> Decision:
    """The one verdict function. A levelfield exception another harness stored by name is
    rebuilt first, so that its class decides as in a native trial; the evidence gains the
    disk's reading of any "No space left on device" and the notes behind the verdict."""
    if log.imported is not None and log.error is None:
        rebuilt = levelfield_error(log.imported.exception_type)
        if rebuilt is not None:
            log = replace(log, error=rebuilt, imported=replace(log.imported, exception_type=None))
    evidence = with_log_evidence(log)
    if evidence is not log.evidence:
        log = replace(log, evidence=evidence)
    reason = classify(log)
    notes = _imported(log)[1] if log.imported is not None else ()
    said = with_outcome_notes(evidence, log)
    if said is not None and notes:
        said = said.model_copy(update={"notes": (*notes, *said.notes)})
    return Decision(reason, OUTCOME_OF[reason], said, notes)


def levelfield_reason(exception_type: str | None) -> Reason | None:
    """The reason of a levelfield exception another harness stored by name; None for any other
    name (the table of that harness's types decides those)."""
    rebuilt = levelfield_error(exception_type)
    return reason_for_error(rebuilt) if rebuilt is not None else None


def _imported(log: PhaseLog) -> tuple[Reason, tuple[str, ...]]:
    assert log.imported is not None
    of_reward = reason_for_reward(log.reward)
    return imported_reason(log.imported, log.reward, of_reward=of_reward, failed=_FAILED)
