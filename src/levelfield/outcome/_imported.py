"""An exception another harness stored by name → whose failure the trial was, and why.

Harbor keeps an exception's class name and message but no kernel evidence, so the verdict rests on
what the exception means, with the message as its evidence. One table, `RULES`, says it: a row per
exception type (and, for catch-all types such as RuntimeError, per kind of message), first match
wins. An agent timing out, exiting non-zero or outgrowing its model's context window is the
agent's failure; the sandbox provider, the environment build, the agent's install, the grader, the
model API and the harness's own bugs are infrastructure. A type nobody listed is infrastructure
too, named "unclassified": a trial is booked against the agent only for what the agent did.

The graded reward decides whenever there is one: an agent that timed out but whose tests pass has
passed (its timeout stays a fact of the trial), as the leaderboard and levelfield's runner count it.
Only a failing reward beside an exception no row knows does not: whether that exception made the
tests fail is unknown, so the trial stays an unclassified infra error, as its note says, and the
leaderboard's † table shows the clean score were it the agent's.
A reward that is not a number in [0, 1] (trial_file.checked_reward) is no reward: a trial with
nothing else to say is the grader's failure, `verifier_error`, never a pass.

A levelfield exception stored by name (one of a hosted sandbox's, `LevelfieldOOMKilled`) is
rebuilt and decided by its class, as in a native trial; only the other harness's own types go
through the table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from levelfield import errors
from levelfield.outcome._log import Imported
from levelfield.records import UNCLASSIFIED, Reason

IMPORTED_NOTE = (
    "imported from Harbor: reason from its exception type and message, no kernel evidence"
)
EVIDENCE_CHARS = 500


@dataclass(frozen=True, slots=True)
class Rule:
    exception_type: str
    reason: Reason
    why: str
    message: re.Pattern[str] | None = None  # None: any message


def _rules(types: str, reason: Reason, why: str, message: str | None = None) -> list[Rule]:
    pattern = re.compile(message, re.IGNORECASE) if message else None
    return [Rule(t, reason, why, pattern) for t in types.split()]


_AGENT = [
    *_rules("AgentTimeoutError", Reason.AGENT_TIMEOUT, "the agent used up its time budget"),
    *_rules(
        "NonZeroAgentExitCodeError", Reason.AGENT_ERROR, "the agent's own process exited non-zero"
    ),
    *_rules(
        "BadRequestError",
        Reason.API_ERROR,
        "the model API refused the account or the model, not the agent's request",
        r"credit balance|billing|quota|api[ _-]?key|unauthori[sz]ed|model .*not (found|exist)",
    ),
    *_rules(
        "BadRequestError ContextLengthExceededError ContextWindowExceededError "
        "OutputLengthExceededError",
        Reason.AGENT_ERROR,
        "the model API refused the request the agent built (a context window outgrown, a "
        "malformed call): the agent's doing",
    ),
]
_SANDBOX = [
    *_rules(
        "EnvironmentStartTimeoutError", Reason.SANDBOX_ERROR, "the sandbox did not start in time"
    ),
    *_rules(
        "DaytonaError SandboxException SandboxTimeoutError SandboxTerminatedError",
        Reason.SANDBOX_ERROR,
        "the sandbox provider failed",
    ),
    *_rules(
        "NotFoundError",
        Reason.SANDBOX_ERROR,
        "the sandbox provider lost the sandbox",
        r"sandbox|container",
    ),
    *_rules("NotFoundError", Reason.API_ERROR, "the model API found no such model or endpoint"),
    *_rules(
        "RuntimeError",
        Reason.OOM_KILLED,
        "the sandbox's process was killed for memory (137 is SIGKILL)",
        r"OOMKilled|out of memory|exit code 137",
    ),
    *_rules(
        "RuntimeError",
        Reason.SANDBOX_ERROR,
        "Docker compose could not build or start the task's environment",
        r"Docker compose command failed",
    ),
    *_rules(
        "AddTestsDirError", Reason.SANDBOX_ERROR, "the tests could not be copied into the sandbox"
    ),
    *_rules(
        "DownloadVerifierDirError",
        Reason.SANDBOX_ERROR,
        "the grader's output could not be copied out of the sandbox",
    ),
]
_SETUP_AND_GRADER = [
    *_rules(
        "AgentSetupTimeoutError", Reason.AGENT_SETUP_FAILED, "the agent's install did not finish"
    ),
    *_rules(
        "RuntimeError",
        Reason.AGENT_SETUP_FAILED,
        "the agent's install script failed: the agent never ran",
        r"Agent setup failed",
    ),
    *_rules("VerifierTimeoutError", Reason.VERIFIER_TIMEOUT, "the grader did not finish"),
    *_rules(
        "RewardFileNotFoundError RewardFileEmptyError VerifierOutputParseError",
        Reason.VERIFIER_ERROR,
        "the grader wrote no readable reward",
    ),
]
_API = _rules(
    "RateLimitError APIConnectionError APITimeoutError APIError APIStatusError "
    "InternalServerError ServiceUnavailableError OverloadedError AuthenticationError "
    "PermissionDeniedError",
    Reason.API_ERROR,
    "the model API failed beyond the agent's retries",
)
_HARNESS = [
    *_rules(
        "RuntimeError",
        Reason.HARNESS_ERROR,
        "the harness lost the tmux session it drives the agent's terminal through",
        r"send non-blocking keys|tmux",
    ),
    *_rules(
        "NameError KeyError AttributeError TypeError ValueError IndexError AssertionError "
        "UnboundLocalError ImportError ModuleNotFoundError ZeroDivisionError JSONDecodeError",
        Reason.HARNESS_ERROR,
        "a bug in the harness's Python code",
    ),
    *_rules("CancelledError", Reason.HARNESS_ERROR, "the harness cancelled the trial"),
]
RULES: Final = (*_AGENT, *_SANDBOX, *_SETUP_AND_GRADER, *_API, *_HARNESS)
_RULES_OF: Final[dict[str, list[Rule]]] = {}
for _rule in RULES:
    _RULES_OF.setdefault(_rule.exception_type, []).append(_rule)


def rule_for(exception_type: str, message: str) -> Rule | None:
    """The first row for this type whose message pattern matches; None: unclassified."""
    for rule in _RULES_OF.get(exception_type, ()):
        if rule.message is None or rule.message.search(message):
            return rule
    return None


def levelfield_error(exception_type: str | None) -> errors.LevelfieldError | None:
    """A levelfield exception stored by name, rebuilt so that its class decides."""
    cls = getattr(errors, exception_type or "", None)
    if not (isinstance(cls, type) and issubclass(cls, errors.LevelfieldError)):
        return None
    try:
        return cls("as stored by the harness")
    except TypeError:  # CeilingHit and its kind take the evidence too
        return cls("as stored by the harness", evidence="")  # type: ignore[call-arg]


def imported_reason(
    imported: Imported, reward: float | None, *, of_reward: Reason, failed: set[Reason]
) -> tuple[Reason, tuple[str, ...]]:
    """The reason of a trial another harness stored, and the evidence notes that say how it was
    reached: its exception's row (the message as evidence), unless a graded reward decides.
    `of_reward` is the reward's own reason; `failed` the reasons booked against the agent."""
    checked = (
        (f"the grader's reward is unusable: {imported.reward_problem}",)
        if imported.reward_problem
        else ()
    )
    kind, message = imported.exception_type, imported.message
    if kind is None:
        return of_reward, (IMPORTED_NOTE, *checked)
    rule = rule_for(kind, message or "")
    reason = rule.reason if rule else Reason.HARNESS_ERROR
    if rule:
        why = f"{kind} → {reason.value}: {rule.why}"
    else:
        why = (
            f"{UNCLASSIFIED}: {kind} → {reason.value}: no row of the import's table "
            "knows its type and message, so it counts as infrastructure (only what the agent "
            "did is booked against it)"
        )
    notes = [IMPORTED_NOTE, why, f"message: {(message or '')[:EVIDENCE_CHARS]}", *checked]
    passed = of_reward is Reason.TESTS_PASSED
    if reward is not None and (passed or (rule is not None and reason not in failed)):
        notes.append(f"graded reward {reward:g} decides; the {kind} is kept")
        if rule is None:
            notes[1] = notes[1].removeprefix(f"{UNCLASSIFIED}: ")
        reason = of_reward
    elif reward is not None and rule is None:
        notes.append(
            f"graded reward {reward:g} does not decide: nobody knows whether the {kind} "
            "caused the failure, so the trial stays an unclassified infra error (the "
            "leaderboard's † table gives the clean score were it the agent's)"
        )
    return reason, tuple(notes)
