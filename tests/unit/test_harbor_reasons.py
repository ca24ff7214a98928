"""Harbor's exception types → the agent's failure or infrastructure, checked against every
exception the 55 shared leaderboard submissions hold, messages read from the archive as the
test runs (nothing pasted). A type the data gains later fails `test_every_type_in_the_data...`
until someone says what it means."""

from __future__ import annotations

import json
import re
import tarfile
from collections import defaultdict
from pathlib import Path

import pytest

from levelfield.harbor.reasons import RULES, judge
from levelfield.harbor.trial_file import read_trial
from levelfield.records import Outcome, Reason

from ..conftest import TB2_LEADERBOARD, require_leaderboard

# What each type seen in the shared data means, by its name and the messages it carries.
EXPECTED = {
    "AgentTimeoutError": Reason.AGENT_TIMEOUT,
    "NonZeroAgentExitCodeError": Reason.AGENT_ERROR,
    "BadRequestError": Reason.AGENT_ERROR,  # the context window the agent's conversation outgrew
    "AgentSetupTimeoutError": Reason.AGENT_SETUP_FAILED,
    "VerifierTimeoutError": Reason.VERIFIER_TIMEOUT,
    "RewardFileNotFoundError": Reason.VERIFIER_ERROR,
    "AddTestsDirError": Reason.SANDBOX_ERROR,
    "DownloadVerifierDirError": Reason.SANDBOX_ERROR,
    "EnvironmentStartTimeoutError": Reason.SANDBOX_ERROR,
    "DaytonaError": Reason.SANDBOX_ERROR,
    "NotFoundError": Reason.SANDBOX_ERROR,  # Modal: "Sandbox ... not found ... shut down"
}
# RuntimeError is Harbor's catch-all: its message says which failure it was.
RUNTIME_ERROR_BY_MESSAGE = {
    "Docker compose command failed": Reason.SANDBOX_ERROR,
    "Agent setup failed with exit code": Reason.AGENT_SETUP_FAILED,
    "failed to send non-blocking keys": Reason.HARNESS_ERROR,  # the harness's tmux session
}


@pytest.fixture(scope="module")
def exceptions() -> dict[str, list[tuple[str, float | None]]]:
    """(message, reward) of every trial with an exception, by type, streamed from the archive."""
    require_leaderboard()
    found: dict[str, list[tuple[str, float | None]]] = defaultdict(list)
    with tarfile.open(TB2_LEADERBOARD) as archive:
        for member in archive:
            if not member.name.endswith("/result.json"):
                continue
            data = json.load(archive.extractfile(member))  # type: ignore[arg-type]
            info = data.get("exception_info")
            if info:
                rewards = (data.get("verifier_result") or {}).get("rewards") or {}
                found[info["exception_type"]].append(
                    (info["exception_message"], rewards.get("reward"))
                )
    return found


def test_every_type_in_the_data_has_a_meaning(exceptions: dict[str, list]) -> None:
    assert set(exceptions) == set(EXPECTED) | {"RuntimeError"}
    assert {r.exception_type for r in RULES} >= set(exceptions)


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_each_type_against_its_real_messages(
    kind: str, exceptions: dict[str, list[tuple[str, float | None]]]
) -> None:
    for message, _ in exceptions[kind]:
        verdict = judge(kind, message, None)
        assert verdict.reason is EXPECTED[kind], message
        assert "unclassified" not in verdict.notes[1]
        assert message[:100] in verdict.notes[2]  # the message is the evidence


def test_runtime_errors_by_what_their_message_says(
    exceptions: dict[str, list[tuple[str, float | None]]],
) -> None:
    seen = set()
    for message, _ in exceptions["RuntimeError"]:
        (family,) = [f for f in RUNTIME_ERROR_BY_MESSAGE if f in message]
        seen.add(family)
        assert judge("RuntimeError", message, None).reason is RUNTIME_ERROR_BY_MESSAGE[family]
    assert seen == set(RUNTIME_ERROR_BY_MESSAGE)


def test_the_reward_decides_a_trial_whose_agent_timed_out(
    exceptions: dict[str, list[tuple[str, float | None]]],
) -> None:
    timed_out = exceptions["AgentTimeoutError"]
    passed = [m for m, reward in timed_out if reward == 1.0]
    failed = [m for m, reward in timed_out if reward == 0.0]
    assert passed and failed
    verdict = judge("AgentTimeoutError", passed[0], 1.0)
    assert (verdict.outcome, verdict.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    assert "kept" in verdict.notes[-1]
    assert judge("AgentTimeoutError", failed[0], 0.0).reason is Reason.AGENT_TIMEOUT
    ungraded = [m for m, reward in timed_out if reward is None]
    assert judge("AgentTimeoutError", ungraded[0], None).outcome is Outcome.FAILED


def test_agent_failures_are_failed_and_the_rest_infrastructure() -> None:
    agent_reasons = {Reason.AGENT_TIMEOUT, Reason.AGENT_ERROR}
    for kind, reason in EXPECTED.items():
        outcome = judge(kind, "", None).outcome
        assert (outcome is Outcome.FAILED) == (reason in agent_reasons), kind
    # an infrastructure failure after grading: the graded reward stands
    assert judge("DownloadVerifierDirError", "", 0.0).reason is Reason.TESTS_FAILED
    assert judge("DownloadVerifierDirError", "", 1.0).reason is Reason.TESTS_PASSED


def test_an_unknown_type_is_infrastructure_named_unclassified() -> None:
    verdict = judge("FluxCapacitorError", "the flux capacitor broke", None)
    assert (verdict.outcome, verdict.reason) == (Outcome.INFRA_ERROR, Reason.HARNESS_ERROR)
    assert "unclassified" in verdict.notes[1]
    assert "flux capacitor broke" in verdict.notes[2]
    assert judge("RuntimeError", "something nobody listed", None).reason is Reason.HARNESS_ERROR


def test_model_api_and_harness_bugs_are_infrastructure() -> None:
    for kind in ("RateLimitError", "APIConnectionError", "InternalServerError"):
        assert judge(kind, "", None).reason is Reason.API_ERROR
    for kind in ("NameError", "KeyError", "AttributeError"):
        assert judge(kind, "name 'x' is not defined", None).reason is Reason.HARNESS_ERROR
    refused = "Your credit balance is too low to access the Anthropic API."
    assert judge("BadRequestError", refused, None).reason is Reason.API_ERROR


def test_secrets_on_the_agents_command_line_are_masked(tmp_path: Path) -> None:
    """Real submissions' error messages carry API keys (`export API_KEY=...`): read as a trial,
    none is kept."""
    require_leaderboard()
    secret = re.compile(r"API_KEY=([A-Za-z0-9_-]{16,})")
    with tarfile.open(TB2_LEADERBOARD) as archive:
        for member in archive:
            if not member.name.endswith("/result.json"):
                continue
            raw = archive.extractfile(member).read()  # type: ignore[union-attr]
            keys = set(secret.findall(raw.decode()))
            if keys:
                break
    assert keys, "the shared data holds a message with a key"
    (tmp_path / "result.json").write_bytes(raw)
    trial = read_trial(str(tmp_path))
    stored = json.dumps(trial.facts)
    assert "API_KEY=***" in stored
    assert not any(key in stored for key in keys)


def test_a_failing_reward_beside_an_unknown_type_stays_unclassified_infra() -> None:
    """Whether the unknown exception made the tests fail is unknown: the booking says
    infrastructure, as the note does, so the leaderboard's † table counts it."""
    message = "infrastructure bootstrap failed"
    verdict = judge("InfraBootstrapFailure", message, 0.0)
    assert (verdict.outcome, verdict.reason) == (Outcome.INFRA_ERROR, Reason.HARNESS_ERROR)
    assert verdict.notes[1].startswith("unclassified")
    assert "does not decide" in verdict.notes[-1]
    passed = judge("InfraBootstrapFailure", message, 1.0)
    assert passed.reason is Reason.TESTS_PASSED  # a graded pass still decides
