"""Evidence → outcome: the one table from reason to outcome, and `classify()`.

Kernel counters outrank exit codes and exceptions: under cgroup v1 an OOM kill shows only as an
exit by SIGKILL (137) and podman even reports OOMKilled=false, so the cgroup's own counter decides.
Errors are looked up along `type(exc).__mro__`, so renaming a subclass cannot change a verdict,
and an error nobody listed is a `harness_error` (our bug), never the agent's failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from levelfield import errors
from levelfield.records import (
    AgentReport,
    AgentSetup,
    ApiCall,
    Evidence,
    ImageRecord,
    Outcome,
    PhaseResult,
    Reason,
)

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


@dataclass(slots=True)
class PhaseLog:
    """What the runner learnt about one trial, phase by phase; `classify` reads it."""

    agent: PhaseResult | None = None
    verifier: PhaseResult | None = None
    reward: float | None = None
    evidence: Evidence | None = None
    error: BaseException | None = None
    api_calls: tuple[ApiCall, ...] = ()
    trajectory: str | None = None  # what a population agent drew; never read by classify()
    image: ImageRecord | None = None
    setup: AgentSetup | None = None
    report: AgentReport | None = None
    graded_nothing: str | None = None  # why the verifier's reward stands on no test (verifier.py)
    grader_broken: str | None = None  # how the agent's own changes broke the grader (verifier.py)
    tampered: tuple[str, ...] = ()  # what of the grader the agent changed (verifier.py)
    left_running: tuple[str, ...] = ()  # the agent's processes when grading began (verifier.py)
    notes: tuple[str, ...] = ()  # what the agent left where the harness reads, and what was skipped


# Whose doing a failed model call is: one rule for every path (the terminal agent's own client,
# the proxy's record of a CLI's calls, what a CLI says of its last call). The API's: a refused
# key (401, 403), rate limits and overload that the retries did not get past, a server error, no
# answer at all or an answer broken off. The agent's: any other 4xx (a malformed request, a
# context too long) and a call it cut short itself (its own deadline, its own exit). So are the
# attempts the proxy refused (a path it does not carry, a call past the trial's model budget),
# whatever status their answer had: they never reached the API.
API_STOP_OUTCOMES: Final = frozenset(
    {"rate_limited", "overloaded", "server_error", "connection_error"}
)
AGENTS_OWN_OUTCOMES: Final = frozenset({"cut_short", "refused", "budget_exhausted"})
AUTH_STATUSES: Final = frozenset({401, 403})


def outcome_for_status(status: int | None, text: str = "") -> str:
    """The word an answer's HTTP status gets (`ApiCall.outcome`); None means no answer came.
    `text` is the answer's body: a 5xx that says it is overloaded is an overload."""
    if status is None:
        return "connection_error"
    if 200 <= status < 300:
        return "ok"
    if status == 429:
        return "rate_limited"
    if status == 529 or (status >= 500 and "overloaded" in text.lower()):
        return "overloaded"
    return "server_error" if status >= 500 else "client_error"


def is_api_failure(status: int | None, outcome: str) -> bool:
    """The one rule: is a call that ended this way the API's failure rather than the agent's?"""
    if outcome in AGENTS_OWN_OUTCOMES:
        return False
    return outcome in API_STOP_OUTCOMES or (outcome != "ok" and status in AUTH_STATUSES)


def stopping_call(calls: tuple[ApiCall, ...] | list[ApiCall]) -> ApiCall | None:
    """The failed call that stopped the agent: its last call (attempts the proxy refused as not
    model calls aside: they reached no API), when no success came after it and the failure was
    the API's."""
    relayed = [c for c in calls if c.outcome != "refused"]
    last = relayed[-1] if relayed else None
    if last is None or not is_api_failure(last.status, last.outcome):
        return None
    return last


# A refused attempt past the first ones the proxy records stands for the run of refusals in a
# row it ended (`model_api._recording`); its error ends with this.
REFUSAL_RUN = "(the last of {n} refused attempts in a row)"
_REFUSAL_RUN = re.compile(r"\(the last of (\d+) refused attempts in a row\)$")


def refusals(calls: tuple[ApiCall, ...] | list[ApiCall], outcome: str) -> int:
    """How many attempts the proxy refused with this outcome (`refused`, `budget_exhausted`),
    counting the runs that one recorded entry stands for."""
    count = 0
    for call in calls:
        if call.outcome == outcome:
            run = _REFUSAL_RUN.search(call.error or "")
            count += int(run.group(1)) if run else 1
    return count


def budget_call(calls: tuple[ApiCall, ...] | list[ApiCall]) -> ApiCall | None:
    """The last call refused because the trial's model budget was spent, if any was."""
    return next((c for c in reversed(calls) if c.outcome == "budget_exhausted"), None)


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
    """
    if log.tampered:
        return Reason.GRADER_TAMPERED
    kernel = reason_from_evidence(log.evidence)
    passed = log.error is None and reason_for_reward(log.reward) is Reason.TESTS_PASSED
    if kernel is not None and not passed:
        return kernel
    if log.error is not None:
        return reason_for_error(log.error)
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
    if log.graded_nothing is not None and not passed:
        return Reason.VERIFIER_ERROR
    if log.reward is None:
        return Reason.VERIFIER_ERROR  # a timed-out agent too: its verifier could have passed it
    if spent and not passed:
        return Reason.BUDGET_EXHAUSTED  # also when the CLI then waited out its timeout
    if log.agent is not None and log.agent.timed_out and not passed:
        return Reason.AGENT_TIMEOUT
    return reason_for_reward(log.reward)


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


def outcome_of(reason: Reason) -> Outcome:
    return OUTCOME_OF[reason]
