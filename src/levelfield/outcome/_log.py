"""What a verdict is decided from: one trial's facts, phase by phase, whichever path gathered them
(the native runner, a hosted sandbox's exec, an imported trial of another harness)."""

from __future__ import annotations

from dataclasses import dataclass

from levelfield.records import (
    AgentReport,
    AgentSetup,
    ApiCall,
    Evidence,
    ImageRecord,
    PhaseResult,
)


@dataclass(frozen=True, slots=True)
class Imported:
    """An exception another harness stored by name, with its message, and what was wrong with
    the reward it stored (not a number in [0, 1]): all an imported trial says of itself."""

    exception_type: str | None = None
    message: str | None = None
    reward_problem: str | None = None


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
    unbacked: str | None = None  # how the tests' own record contradicts the reward (verifier.py)
    tampered: tuple[str, ...] = ()  # what of the grader the agent changed (verifier.py)
    left_running: tuple[str, ...] = ()  # the agent's processes when grading began (verifier.py)
    filled_beside: str | None = None  # the disk filled while the agent's processes ran beside
    # the grader: not evidence outside the agent's reach (verifier.py)
    notes: tuple[str, ...] = ()  # what the agent left where the harness reads, and what was skipped
    imported: Imported | None = None  # a trial another harness ran: what it stored of itself


