from dataclasses import replace

import pytest

from levelfield import errors
from levelfield.outcome import (
    OUTCOME_OF,
    PhaseLog,
    classify,
    outcome_of,
    reason_for_error,
    ungraded_after_timeout,
)
from levelfield.records import AgentReport, AgentSetup, Evidence, Outcome, PhaseResult, Reason


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
        (  # filled while the agent's processes wrote beside the grader: the tests decide
            PhaseLog(reward=0.0, evidence=Evidence(storage_full=True), filled_beside="x"),
            Reason.TESTS_FAILED,
        ),
        (  # and a kill at the memory ceiling beside it still is the ceiling's
            PhaseLog(
                reward=0.0, evidence=Evidence(storage_full=True, oom_kills=1), filled_beside="x"
            ),
            Reason.OOM_KILLED,
        ),
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


SETUP_FAILED = AgentSetup(mode="sandbox", phase=PhaseResult(exit_code=1, output_tail="E404"))
SETUP_OK = AgentSetup(mode="sandbox", phase=PhaseResult(exit_code=0))
API_FAILED = AgentReport(exit_code=1, api_failure=True, message="Invalid API key")


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (PhaseLog(setup=SETUP_FAILED), Reason.AGENT_SETUP_FAILED),
        (PhaseLog(setup=SETUP_OK, reward=0.0), Reason.TESTS_FAILED),
        (PhaseLog(setup=AgentSetup(mode="mounted"), reward=0.0), Reason.TESTS_FAILED),
        (
            PhaseLog(setup=AgentSetup(mode="sandbox", phase=PhaseResult(timed_out=True))),
            Reason.AGENT_SETUP_FAILED,
        ),
        (PhaseLog(setup=SETUP_FAILED, evidence=Evidence(oom_kills=1)), Reason.OOM_KILLED),
        (PhaseLog(error=errors.AgentSetupError("npm view failed")), Reason.AGENT_SETUP_FAILED),
        (PhaseLog(reward=0.0, graded_nothing="ctrf.json missing"), Reason.VERIFIER_ERROR),
        # a pass that stands on no test (the tests never started) is no pass: the verifier's
        (PhaseLog(reward=1.0, graded_nothing="ctrf.json missing"), Reason.VERIFIER_ERROR),
        (PhaseLog(reward=0.0, report=API_FAILED), Reason.API_ERROR),
        (PhaseLog(reward=1.0, report=API_FAILED), Reason.TESTS_PASSED),
        (PhaseLog(reward=0.0, report=AgentReport(exit_code=1)), Reason.TESTS_FAILED),
    ],
)
def test_setup_grader_and_api_failures_are_not_the_agents(log: PhaseLog, reason: Reason) -> None:
    """No trial whose agent never ran, or whose verifier graded nothing, is booked as failed;
    kernel evidence still decides first (an OOM kill during the install is oom_killed)."""
    assert classify(log) is reason
    if reason not in (Reason.TESTS_PASSED, Reason.TESTS_FAILED):
        assert outcome_of(reason) is Outcome.INFRA_ERROR


TIMED_OUT = PhaseResult(timed_out=True, duration_s=30.0)


@pytest.mark.parametrize(
    ("log", "reason", "said"),
    [
        (PhaseLog(agent=TIMED_OUT, reward=0.0), Reason.AGENT_TIMEOUT, None),
        (PhaseLog(agent=TIMED_OUT, reward=1.0), Reason.TESTS_PASSED, None),
        (
            PhaseLog(agent=TIMED_OUT, reward=None, verifier=PhaseResult(timed_out=True)),
            Reason.VERIFIER_TIMEOUT,
            "then the verifier timed out",
        ),
        (PhaseLog(agent=TIMED_OUT, reward=None), Reason.VERIFIER_ERROR, "wrote no reward"),
        (
            PhaseLog(agent=TIMED_OUT, reward=0.0, graded_nothing="ctrf.json missing"),
            Reason.VERIFIER_ERROR,
            "then the verifier graded nothing",
        ),
        (
            PhaseLog(agent=TIMED_OUT, reward=0.0, graded_nothing="x", grader_broken="dpkg"),
            Reason.GRADER_BROKEN,
            None,
        ),
    ],
)
def test_an_agent_timeout_does_not_outrank_a_grader_that_could_not_grade(
    log: PhaseLog, reason: Reason, said: str | None
) -> None:
    """A timed-out agent can still pass (the verifier runs anyway): when the verifier then did
    not grade, the result is unknown, an infra error with both facts in the evidence."""
    assert classify(log) is reason
    note = ungraded_after_timeout(log)
    assert (note is None) == (said is None)
    if said is not None:
        assert said in note and "the agent timed out after 30.0 s" in note  # type: ignore[operator]
        assert outcome_of(reason) is Outcome.INFRA_ERROR


@pytest.mark.parametrize("reward", [1.0, 0.0, None])
def test_a_grader_ended_from_inside_or_denied_by_its_report_is_the_agents(
    reward: float | None,
) -> None:
    """Once the tests started, the code under test runs in the grader: a reward its report does
    not back, or a run that ended before its report (or any reward), is the agent's failure,
    whatever the reward file says; kernel evidence and a tampered grader still come first."""
    log = PhaseLog(reward=reward, unbacked="ctrf.json missing after the tests started")
    assert classify(log) is Reason.TESTS_FAILED
    assert outcome_of(Reason.TESTS_FAILED) is Outcome.FAILED
    assert classify(replace(log, evidence=Evidence(oom_kills=1))) is Reason.OOM_KILLED
    assert classify(replace(log, tampered=("reward",))) is Reason.GRADER_TAMPERED
    timed_out = replace(log, verifier=PhaseResult(timed_out=True))
    assert classify(timed_out) is Reason.VERIFIER_TIMEOUT


def test_a_grader_the_agent_broke_is_the_agents_failure() -> None:
    log = PhaseLog(reward=0.0, graded_nothing="ctrf.json missing", grader_broken="dpkg")
    assert classify(log) is Reason.GRADER_BROKEN
    assert outcome_of(Reason.GRADER_BROKEN) is Outcome.FAILED
    assert classify(PhaseLog(reward=1.0, grader_broken="dpkg")) is Reason.TESTS_PASSED
