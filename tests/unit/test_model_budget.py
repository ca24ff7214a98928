"""What the proxy carries and what a trial may spend, as pure rules: the allow-list's verdict on
request-targets, methods, queries and headers; the meter's judgement of a ceiling; the outcome
row of a spent budget and its place in `classify`; the options, the card and the report."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from levelfield.agents import AgentOptions
from levelfield.analysis import summarize
from levelfield.analysis.simulate import simulate_trials
from levelfield.config import RunConfig
from levelfield.errors import RunConfigError
from levelfield.executor import run
from levelfield.model_api.allowlist import Admitted, Refusal, admit, body_refusal
from levelfield.model_api.budget import IN_FLIGHT, Meter, paid_tools, spent_answer, usage_asked
from levelfield.model_api.cost import load_prices
from levelfield.outcome import (
    PhaseLog,
    budget_call,
    classify,
    is_api_failure,
    outcome_of,
    stopping_call,
)
from levelfield.records import AgentReport, ApiCall, ModelBudget, Outcome, PhaseResult, Reason
from levelfield.report import render_card, show_summary

from ..conftest import MakeTask

ROUTED = ("anthropic", "openai", "gemini")
GEMINI = "/gemini/v1beta/models/gemini-2.5-pro"


@pytest.mark.parametrize(
    ("method", "target", "endpoint", "model"),
    [
        ("POST", "/anthropic/v1/messages", "POST /v1/messages", None),
        ("POST", "/anthropic/v1/messages?beta=true", "POST /v1/messages", None),
        ("POST", "/anthropic/v1/messages/count_tokens", "POST /v1/messages/count_tokens", None),
        ("POST", "/openai/chat/completions", "POST /chat/completions", None),
        ("POST", "/openai/responses", "POST /responses", None),
        ("GET", "/openai/models", "GET /models", None),
        ("GET", "/openai/models?client_version=0.46.0", "GET /models", None),
        (
            "POST",
            GEMINI + ":streamGenerateContent?alt=sse&key=levelfield-trial-00ff",
            "POST /v1beta/models/MODEL:streamGenerateContent",
            "gemini-2.5-pro",
        ),
        ("POST", GEMINI + ":generateContent", "POST /v1beta/models/MODEL:generateContent", None),
        ("POST", GEMINI + ":countTokens", "POST /v1beta/models/MODEL:countTokens", None),
    ],
)
def test_the_model_calls_the_agents_make_are_carried(
    method: str, target: str, endpoint: str, model: str | None
) -> None:
    admitted = admit(method, target, {}, ROUTED)
    assert isinstance(admitted, Admitted), admitted
    assert admitted.endpoint.name == endpoint
    assert admitted.path == target[len(admitted.provider) + 1 :]
    if model is not None:
        assert admitted.model == model


@pytest.mark.parametrize(
    ("method", "target", "rule"),
    [
        ("GET", "/anthropic/v1/files", "not a model call"),
        ("POST", "/anthropic/v1/messages/batches", "not a model call"),
        ("DELETE", "/openai/files/file-1", "not a model call"),
        ("POST", "/openai/fine_tuning/jobs", "not a model call"),
        ("GET", "/gemini/v1beta/cachedContents", "not a model call"),
        ("POST", GEMINI + ":batchGenerateContent", "not a model call"),
        ("GET", "/openai/chat/completions", "only POST"),
        ("post", "/anthropic/v1/messages", "only POST"),
        ("TRACE", "/anthropic/v1/messages", "only POST"),
        ("POST", "/anthropic/v1/messages/../../admin", "dot segment"),
        ("POST", "/anthropic/./v1/messages", "dot segment"),
        ("POST", "/anthropic/v1/messages/%2e%2e/files", "percent-encoding"),
        ("POST", "/anthropic%2fv1%2fmessages", "percent-encoding"),
        ("POST", "//anthropic/v1/messages", "empty path segment"),
        ("POST", "/anthropic/v1//messages", "empty path segment"),
        ("POST", "/anthropic/v1/messages/", "empty path segment"),
        ("POST", "/anthropic/v1/messages;x", "a character other than"),
        ("POST", "/anthropic/v1/messages\\..\\files", "a character other than"),
        ("POST", "/anthropic/v1/messages#x", "fragment"),
        ("POST", "/anthropic/v1/messages.", "not a model call"),
        ("POST", "/anthropic/V1/MESSAGES", "not a model call"),
        ("POST", "/ANTHROPIC/v1/messages", "no route"),
        ("POST", "http://api.anthropic.com/v1/messages", "must be a path"),
        ("CONNECT", "api.anthropic.com:443", "must be a path"),
        ("OPTIONS", "*", "must be a path"),
        ("POST", "/anthropic/v1/messages?beta=true&x=1", "query parameter 'x'"),
        ("POST", "/anthropic/v1/messages?beta=true&beta=false", "given twice"),
        ("POST", "/anthropic/v1/messages?beta=../files", "a value other than"),
        ("POST", GEMINI + ":generateContent?key=a%26b", "a value other than"),
        ("POST", "/anthropic/v1/messages?", None),
        ("POST", "/anthropic/v1/messages/" + "a" * 2000, "longer than"),
    ],
)
def test_anything_else_is_refused_naming_its_rule(method: str, target: str, rule: str) -> None:
    verdict = admit(method, target, {}, ROUTED)
    if rule is None:  # an empty query is no query
        assert isinstance(verdict, Admitted)
        return
    assert isinstance(verdict, Refusal), verdict
    assert rule in verdict.rule and 400 <= verdict.status < 500


def test_a_provider_not_routed_and_a_rerouting_header_are_refused() -> None:
    only_openai = admit("POST", "/anthropic/v1/messages", {}, ("openai",))
    assert isinstance(only_openai, Refusal) and "this proxy relays /openai" in only_openai.rule
    for header in ("X-HTTP-Method-Override", "x-original-url", "Forwarded"):
        refused = admit("POST", "/openai/responses", _Headers({header: "DELETE"}), ROUTED)
        assert isinstance(refused, Refusal) and "re-route" in refused.rule
    folded = admit("POST", "/openai/responses", _Headers({"X-Note": "a\r\n b"}), ROUTED)
    assert isinstance(folded, Refusal) and "folded" in folded.rule


class _Headers(dict[str, str]):
    """Case-insensitive, as http.server's headers are."""

    def get(self, name: str, default: object = None) -> object:  # type: ignore[override]
        return next((v for k, v in self.items() if k.lower() == name.lower()), default)


def test_a_background_response_is_refused() -> None:
    admitted = admit("POST", "/openai/responses", {}, ROUTED)
    assert isinstance(admitted, Admitted)
    assert body_refusal(admitted, {"model": "m", "background": True}) is not None
    assert body_refusal(admitted, {"model": "m"}) is None


# -- the meter ------------------------------------------------------------------------------


def test_the_call_that_reaches_the_ceiling_is_the_last_that_goes() -> None:
    meter = Meter(ModelBudget(max_tokens=1000))
    assert meter.refusal() is None
    meter.charge("m", 600, 300)
    assert meter.refusal() is None  # 900 < 1000: the next call goes, and may cross
    meter.charge("m", 500, 200)
    refused = meter.refusal()
    assert refused is not None and refused.spent
    assert "1,600 tokens" in refused.why and "of a ceiling of 1,000 tokens" in refused.why


def test_an_answer_without_usage_is_charged_a_token_per_byte() -> None:
    meter = Meter(ModelBudget(max_tokens=10**6))
    meter.charge("m", None, None, sized=4000)
    meter.charge("m", 10, None, sized=4000)  # its input was reported: no estimate
    spend = meter.spend()
    assert (spend.tokens, spend.estimated_tokens) == (4010, 4000)
    assert "4,000 of them by size" in meter.words()


def test_a_cost_ceiling_prices_each_call_at_its_model() -> None:
    meter = Meter(ModelBudget(max_cost_usd=0.01), load_prices(), model="gpt-5")
    meter.charge("claude-opus-4-1-20250805", 100, 100)  # a snapshot of a listed model
    assert meter.spend().cost_usd == pytest.approx((100 * 15 + 100 * 75) / 1e6)
    meter.charge(None, 1000, 0)  # names no model: the agent's own
    assert meter.spend().cost_usd == pytest.approx(0.009 + 1000 * 1.25 / 1e6)
    assert meter.refusal("gpt-5") is not None  # $0.01025 >= $0.01
    fresh = Meter(ModelBudget(max_cost_usd=1.0), load_prices())
    unpriced = fresh.refusal("o3-pro")
    assert unpriced is not None and not unpriced.spent and "no price" in unpriced.why
    search = fresh.refusal("gpt-5", {"tools": [{"type": "web_search_preview"}]})
    assert search is not None and not search.spent and "web_search_preview" in search.why


@pytest.mark.parametrize(
    ("body", "paid"),
    [
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, True),
        ({"tools": [{"type": "code_execution_20250522"}]}, True),
        ({"tools": [{"name": "Bash", "input_schema": {}}]}, False),
        ({"tools": [{"type": "function", "name": "exec_command"}]}, False),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, True),
        ({"web_search_options": {}}, True),
        ({"tools": [{"googleSearch": {}}]}, True),
        ({"tools": [{"google_search_retrieval": {}}]}, True),
        ({"tools": [{"functionDeclarations": [{"name": "run_shell_command"}]}]}, False),
        ({"tools": [{"codeExecution": {}}]}, True),
    ],
)
def test_per_use_tools_are_found(body: dict[str, object], paid: bool) -> None:
    assert bool(paid_tools(body)) is paid


def test_no_budget_refuses_nothing() -> None:
    meter = Meter(ModelBudget())
    meter.charge("m", 10**9, 10**9)
    assert not meter.enabled and meter.refusal("anything", {"web_search_options": {}}) is None


def test_at_most_in_flight_calls_hold_a_place_under_a_budget() -> None:
    meter, inside, most = Meter(ModelBudget(max_tokens=10)), [0], [0]
    lock = threading.Lock()

    def call() -> None:
        with meter.slot():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=call) for _ in range(3 * IN_FLIGHT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == IN_FLIGHT


def test_a_chat_stream_is_asked_for_its_usage() -> None:
    asked = json.loads(usage_asked(b'{"stream": true, "stream_options": {"x": 1}}'))
    assert asked["stream_options"] == {"x": 1, "include_usage": True}
    assert usage_asked(b'{"stream": false}') == b'{"stream": false}'
    assert usage_asked(b"not json") == b"not json"


def test_the_refusal_is_in_each_providers_shape_for_spent_credit() -> None:
    status, body = spent_answer("anthropic", "spent")
    assert (status, body["type"], body["error"]["type"]) == (400, "error", "invalid_request_error")
    status, body = spent_answer("openai", "spent")
    assert (status, body["error"]["code"]) == (429, "insufficient_quota")
    status, body = spent_answer("gemini", "spent")
    assert (status, body["error"]["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert "limit: 0" in body["error"]["message"]  # what Gemini CLI reads as a final quota


# -- the outcome ------------------------------------------------------------------------------


def _call(outcome: str, status: int | None = 200) -> ApiCall:
    return ApiCall(started_at="t", latency_s=0.0, attempt=1, status=status, outcome=outcome)  # type: ignore[arg-type]


SPENT = _call("budget_exhausted", 429)
REFUSED = _call("refused", 403)
OUTAGE = _call("server_error", 500)


def test_a_spent_budget_is_the_agents_failure() -> None:
    assert outcome_of(Reason.BUDGET_EXHAUSTED) is Outcome.FAILED
    assert not is_api_failure(403, "refused") and not is_api_failure(429, "budget_exhausted")
    assert is_api_failure(403, "client_error")  # a refused key is still the API's


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        (PhaseLog(reward=0.0, api_calls=(_call("ok"), SPENT)), Reason.BUDGET_EXHAUSTED),
        (PhaseLog(reward=1.0, api_calls=(_call("ok"), SPENT)), Reason.TESTS_PASSED),
        (
            PhaseLog(reward=0.0, api_calls=(SPENT,), report=AgentReport(api_failure=True)),
            Reason.BUDGET_EXHAUSTED,  # what the CLI said of the refusal is not an outage
        ),
        (
            PhaseLog(reward=0.0, api_calls=(SPENT,), agent=PhaseResult(timed_out=True)),
            Reason.BUDGET_EXHAUSTED,
        ),
        (PhaseLog(reward=None, api_calls=(SPENT,)), Reason.VERIFIER_ERROR),  # ungraded
        (PhaseLog(reward=0.0, api_calls=(OUTAGE, REFUSED)), Reason.API_ERROR),
        (PhaseLog(reward=0.0, api_calls=(_call("ok"), REFUSED)), Reason.TESTS_FAILED),
    ],
)
def test_classify_with_the_proxy_s_refusals(log: PhaseLog, reason: Reason) -> None:
    assert classify(log) is reason


def test_the_stopping_call_skips_refused_attempts_and_the_budget_call_is_the_last() -> None:
    assert stopping_call([OUTAGE, REFUSED]) is OUTAGE
    later = _call("budget_exhausted", 400)
    assert budget_call([SPENT, REFUSED, later]) is later and budget_call([REFUSED]) is None


# -- what the reports say --------------------------------------------------------------------


def test_the_card_and_the_report_state_the_budget() -> None:
    trials = simulate_trials(n_tasks=4, seed=1)
    budget = ModelBudget(max_tokens=200_000, max_cost_usd=0.5).model_dump()
    summary = summarize(trials, info={"run_id": "r", "budget": budget}, n_resamples=50)
    assert "| model budget per trial | 200,000 tokens, $0.5 |" in render_card(summary)
    console = Console(width=200, record=True, color_system=None)
    show_summary(summary, console)
    assert "model budget per trial: 200,000 tokens, $0.5" in console.export_text()
    none = summarize(trials, info={"budget": ModelBudget().model_dump()}, n_resamples=50)
    assert "| model budget per trial | none |" in render_card(none)
    silent = summarize(trials, info={}, n_resamples=50)
    assert "| model budget per trial | unknown |" in render_card(silent)


# -- refused before the run ------------------------------------------------------------------


def test_a_budget_the_run_could_not_keep_is_refused_before_any_trial(
    make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `command` agent given no key is out of the proxy's sight; a cost ceiling needs its
    model priced. Both are bad input, said before the store is touched."""
    root = make_task()
    budget = ModelBudget(max_tokens=1000)
    unproxied = AgentOptions(command="true", name="mine", budget=budget)
    monkeypatch.delenv("LEVELFIELD_NO_SUCH_KEY", raising=False)
    with pytest.raises(RunConfigError, match="add --api-key-env"):
        run(RunConfig(dataset=root.parent, out=tmp_path / "a", agents=["command"],
                      agent_options=unproxied))  # fmt: skip
    unpriced = AgentOptions(model="no-such-model", budget=ModelBudget(max_cost_usd=1.0))
    with pytest.raises(RunConfigError, match="'no-such-model' has no price"):
        run(RunConfig(dataset=root.parent, out=tmp_path / "b", agents=["terminal"],
                      agent_options=unpriced))  # fmt: skip
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_the_options_reach_the_budget_and_refuse_nonsense(
    make_task: MakeTask, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from levelfield.cli.app import app

    runner = CliRunner()
    help_text = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output
    assert "--max-tokens-per-trial" in help_text and "--max-cost-per-trial" in help_text
    root = make_task()
    bad = runner.invoke(
        app, ["run", str(root.parent), "--out", str(tmp_path / "r"), "--max-tokens-per-trial", "0"]
    )
    assert bad.exit_code == 2 and not (tmp_path / "r").exists()
