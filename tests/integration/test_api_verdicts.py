"""Whose failure a model call's end is: one rule on every path (`outcome.is_api_failure`), tried
on real process sandboxes with the scripted model failing for real on loopback.

- A `command` agent given a key goes through the recording proxy, so its failed calls decide the
  verdict as a CLI preset's do: an outage, a stream reset mid-way, an error event inside a 200
  stream are the API's (infra_error/api_error); a 400 is the agent's own request; a call its
  deadline cut short is its timeout, recorded, not dropped after a 30 s wait.
- The `terminal` agent's own client follows the same rule: a context-length-like 400 ends its run
  and the trial is graded as it stands; a call cut short by its deadline is agent_timeout. It
  keeps the model budget as the proxy does: past the ceiling, budget_exhausted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield.agents import AgentOptions
from levelfield.model_api._http import LoopbackServer
from levelfield.model_api.scripted_model import Failure, ScriptedModel, serve
from levelfield.records import ModelBudget, Outcome, Reason, TrialRecord

from ..conftest import MakeTask
from ._helpers import mini_agent_task, run_records

pytestmark = pytest.mark.sandbox
KEY = "sk-levelfield-planted-verdicts-0b7e55"


def _one_trial(
    task: Path, tmp_path: Path, agent: str, options: AgentOptions, server: LoopbackServer
) -> TrialRecord:
    """One trial of `agent` on process; the scripted model's server is stopped after it."""
    try:
        (record,) = run_records(
            task.parent, tmp_path / "run", agents=[agent], agent_options=options,
            policies=["uncapped"], backend="process",
        )  # fmt: skip
    finally:
        server.stop()
    return record


@pytest.mark.parametrize(
    ("failure", "verdict", "last_call"),
    [
        ("500@1+", (Outcome.INFRA_ERROR, Reason.API_ERROR), "server_error"),
        ("reset@1+", (Outcome.INFRA_ERROR, Reason.API_ERROR), "connection_error"),
        ("stream-error@1+", (Outcome.INFRA_ERROR, Reason.API_ERROR), "overloaded"),
        ("400@1+", (Outcome.FAILED, Reason.TESTS_FAILED), "client_error"),
        ("hang@1", (Outcome.FAILED, Reason.AGENT_TIMEOUT), "cut_short"),
    ],
)
def test_a_command_agent_s_failed_calls_decide_its_verdict_through_the_proxy(
    failure: str,
    verdict: tuple[Outcome, Reason],
    last_call: str,
    make_task: MakeTask,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = mini_agent_task(make_task, agent_timeout=10)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    model = ScriptedModel.for_dataset(task, failures=[Failure.parse(failure)], require_key=KEY)
    server = serve(model)
    options = AgentOptions(
        command="python3 /app/mini_agent.py",
        name="mini",
        api_key_env="OPENAI_API_KEY",
        base_url=f"http://127.0.0.1:{server.port}/v1",
    )
    record = _one_trial(task, tmp_path, "command", options, server)
    assert (record.outcome, record.reason) == verdict, (record.evidence.notes, record.agent_phase)
    calls = record.api_calls
    assert calls and len(calls) == model.calls and calls[-1].outcome == last_call, calls
    if verdict[1] is Reason.API_ERROR:
        assert any("the model API stopped the agent" in n for n in record.evidence.notes)
    if last_call == "cut_short":  # recorded at once when the agent died, not after 30 s
        assert record.agent_phase is not None and record.agent_phase.timed_out
        assert record.duration_s < 25, record.telemetry.phase_s


@pytest.mark.parametrize(
    ("failure", "verdict", "last_call"),
    [
        ("400@1+", (Outcome.FAILED, Reason.TESTS_FAILED), "client_error"),
        ("hang@1", (Outcome.FAILED, Reason.AGENT_TIMEOUT), "cut_short"),
        ("429@1+", (Outcome.INFRA_ERROR, Reason.API_ERROR), "rate_limited"),
    ],
)
def test_the_terminal_agent_books_only_the_api_s_failures_as_the_api_s(
    failure: str,
    verdict: tuple[Outcome, Reason],
    last_call: str,
    make_task: MakeTask,
    tmp_path: Path,
) -> None:
    task = make_task("answer", agent_timeout=6)
    model = ScriptedModel([], failures=[Failure.parse(failure)])
    server = serve(model)
    options = AgentOptions(
        model="scripted",
        base_url=f"http://127.0.0.1:{server.port}/v1",
        api_attempts=2,
        api_backoff_s=0.05,
    )
    record = _one_trial(task, tmp_path, "terminal", options, server)
    assert (record.outcome, record.reason) == verdict, (record.error, record.agent_phase)
    assert [c.outcome for c in record.api_calls][-1] == last_call
    if last_call == "client_error":  # not retried: the same request cannot succeed
        assert len(record.api_calls) == 1 and record.error is None
        assert record.agent_phase is not None and "refused" in record.agent_phase.output_tail


def test_the_terminal_agent_keeps_the_model_budget_too(make_task: MakeTask, tmp_path: Path) -> None:
    """Its own client keeps the budget the proxy keeps for the others: a model that never
    answers usefully is asked again until the ceiling, then the run ends, budget_exhausted."""
    task = make_task("answer", agent_timeout=30)
    model = ScriptedModel([])  # answers in prose, which the terminal agent asks to have again
    server = serve(model)
    options = AgentOptions(
        model="scripted",
        base_url=f"http://127.0.0.1:{server.port}/v1",
        budget=ModelBudget(max_tokens=300),
    )
    record = _one_trial(task, tmp_path, "terminal", options, server)
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.BUDGET_EXHAUSTED), (
        record.error,
        record.evidence.notes,
    )
    *answered, refused = record.api_calls
    spent = sum((c.tokens_in or 0) + (c.tokens_out or 0) for c in answered)
    assert all(c.outcome == "ok" for c in answered) and spent >= 300
    assert refused.outcome == "budget_exhausted" and "of a ceiling of 300 tokens" in refused.error
    assert model.calls == len(answered) and record.budget == ModelBudget(max_tokens=300)
