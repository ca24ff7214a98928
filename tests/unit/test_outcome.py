import pytest

from levelfield import errors
from levelfield.outcome import OUTCOME_OF, PhaseLog, classify, outcome_of, reason_for_error
from levelfield.records import Evidence, Outcome, PhaseResult, Reason


def test_every_reason_has_exactly_one_outcome() -> None:
    assert set(OUTCOME_OF) == set(Reason)


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (PhaseLog(reward=1.0), Reason.TESTS_PASSED),
        (PhaseLog(reward=0.0), Reason.TESTS_FAILED),
        (PhaseLog(reward=None), Reason.VERIFIER_ERROR),
        (PhaseLog(reward=0.0, evidence=Evidence(oom_kills=1)), Reason.OOM_KILLED),
        (PhaseLog(reward=0.0, evidence=Evidence(pids_max_hits=3)), Reason.PIDS_EXHAUSTED),
        (PhaseLog(reward=0.0, evidence=Evidence(storage_full=True)), Reason.STORAGE_EXHAUSTED),
        (PhaseLog(reward=0.0, agent=PhaseResult(timed_out=True)), Reason.AGENT_TIMEOUT),
        (PhaseLog(reward=0.0, verifier=PhaseResult(timed_out=True)), Reason.VERIFIER_TIMEOUT),
        (PhaseLog(error=errors.SandboxStartError("x")), Reason.SANDBOX_ERROR),
        (PhaseLog(error=errors.AgentError("x")), Reason.AGENT_ERROR),
        (PhaseLog(error=RuntimeError("bug")), Reason.HARNESS_ERROR),
    ],
)
def test_classify(log: PhaseLog, reason: Reason) -> None:
    assert classify(log) is reason


def test_kernel_evidence_outranks_timeouts_and_errors() -> None:
    log = PhaseLog(
        agent=PhaseResult(timed_out=True),
        evidence=Evidence(oom_kills=2),
        error=errors.SandboxDied("init gone"),
    )
    assert classify(log) is Reason.OOM_KILLED
    assert outcome_of(Reason.OOM_KILLED) is Outcome.INFRA_ERROR


def test_a_recovered_ceiling_hit_still_passes() -> None:
    """An agent that was OOM-killed once, fell back and passed the tests has passed."""
    assert classify(PhaseLog(reward=1.0, evidence=Evidence(oom_kills=1))) is Reason.TESTS_PASSED


def test_errors_are_looked_up_along_the_mro() -> None:
    class RenamedStartFailure(errors.SandboxStartError):
        pass

    assert reason_for_error(RenamedStartFailure("x")) is Reason.SANDBOX_ERROR
    assert reason_for_error(KeyError("x")) is Reason.HARNESS_ERROR


def test_agent_timeout_is_the_agents_failure_verifier_timeout_is_not() -> None:
    assert outcome_of(Reason.AGENT_TIMEOUT) is Outcome.FAILED
    assert outcome_of(Reason.VERIFIER_TIMEOUT) is Outcome.INFRA_ERROR
