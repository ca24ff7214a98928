"""The CLI agents' own reports, read from output captured from the real CLIs against an endpoint
answering 401 (Claude Code 2.1, Codex 0.171, Gemini CLI 0.61), and from a successful run's shape."""

import json
from typing import Any

import pytest

from levelfield.agents._cli_report import read_claude_code, read_codex, read_gemini_cli
from levelfield.outcome import PhaseLog, classify
from levelfield.records import AgentReport, PhaseResult, Reason

CLAUDE_401 = "\n".join(
    [
        json.dumps({"type": "system", "subtype": "init", "model": "claude-x"}),
        json.dumps({"type": "system", "subtype": "api_retry", "error_status": 401}),
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": True,
                "num_turns": 1,
                "total_cost_usd": 0,
                "api_error_status": 401,
                "terminal_reason": "api_error",
                "result": "Invalid API key · Fix external API key",
            }
        ),
    ]
)
CLAUDE_OK = "\n".join(
    [
        "some stray line the CLI printed",
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "text", "text": "Let me look."},
                        {"type": "tool_use", "name": "Bash", "input": {"command": "ls /app"}},
                    ]
                },
            }
        ),
        json.dumps(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "num_turns": 4,
                "total_cost_usd": 0.0123,
                "result": "Done.",
            }
        ),
    ]
)
UNAUTHORIZED = "unexpected status 401 Unauthorized: invalid x-api-key"
CODEX_401 = "\n".join(
    [
        "2026-12-03T07:53:21Z ERROR codex_models_manager: failed to refresh available models",
        json.dumps({"type": "thread.started", "thread_id": "01a2"}),
        json.dumps({"type": "turn.started"}),
        json.dumps({"type": "error", "message": f"Reconnecting... 1/5 ({UNAUTHORIZED})"}),
        json.dumps({"type": "turn.failed", "error": {"message": f"{UNAUTHORIZED}, url: x"}}),
    ]
)
COMMAND = {"id": "i1", "type": "command_execution", "command": "echo 42 > a", "exit_code": 0}
CODEX_OK = "\n".join(
    [
        json.dumps({"type": "thread.started", "thread_id": "01a2"}),
        json.dumps({"type": "item.completed", "item": COMMAND}),
        json.dumps({"type": "turn.completed", "usage": {"input_tokens": 10}}),
    ]
)
GEMINI_401 = """YOLO mode is enabled. All tool calls will be automatically approved.
{
  "session_id": "2f28",
  "error": {
    "type": "Error",
    "message": "{\\"type\\":\\"error\\",\\"error\\":{\\"message\\":\\"invalid x-api-key\\"}}",
    "code": 401
  }
}
"""
GEMINI_CONFIG = '{\n  "error": {"message": "Invalid auth method selected.", "code": 41}\n}'


def test_claude_code_api_failure_is_read_from_its_result_line() -> None:
    reading = read_claude_code(CLAUDE_401, 1)
    report = reading.report
    assert report.api_failure and report.exit_code == 1 and report.turns == 1
    assert report.status == "success (is_error)" and "Invalid API key" in (report.message or "")


def test_claude_code_success_gives_turns_cost_and_its_commands() -> None:
    reading = read_claude_code(CLAUDE_OK, 0)
    assert not reading.report.api_failure
    assert (reading.report.turns, reading.report.cost_usd) == (4, 0.0123)
    assert [c["command"] for c in reading.commands] == ["ls /app"]


def test_codex_api_failure_is_a_failed_turn_with_an_http_status() -> None:
    reading = read_codex(CODEX_401, 1)
    assert reading.report.api_failure and reading.report.status == "turn.failed"
    assert "401" in (reading.report.message or "")


def test_codex_success_gives_its_commands_with_exit_codes() -> None:
    reading = read_codex(CODEX_OK, 0)
    assert not reading.report.api_failure and reading.report.turns == 1
    assert reading.commands == ({"command": "echo 42 > a", "delay_s": 0.0, "exit_code": 0},)


def test_gemini_cli_http_status_is_an_api_failure_but_its_own_config_error_is_not() -> None:
    assert read_gemini_cli(GEMINI_401, 1).report.api_failure
    config = read_gemini_cli(GEMINI_CONFIG, 41).report
    assert not config.api_failure and config.status == "error"
    assert read_gemini_cli("no json at all", 1).report.status is None


GEMINI_IN_BACKOFF = """\
Attempt 2 failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request
    at file:///run/levelfield/agent/lib/node_modules/@google/gemini-cli/bundle/chunk.js:267671:13
    at async retryWithBackoff (file:///run/levelfield/agent/bundle/chunk.js:308039:23)
[STARTUP] Cannot measure phase 'cleanup_ops': start mark not found (likely cleared by reset).
Attempt 3 failed. Retrying with backoff... Error: exception TypeError: fetch failed sending request
    at file:///run/levelfield/agent/lib/node_modules/@google/gemini-cli/bundle/chunk.js:267671:13
    at async Models.generateContent (file:///run/levelfield/agent/bundle/chunk.js:268643:16)
"""


def test_gemini_cli_ended_while_retrying_its_api_is_an_api_failure() -> None:
    """Captured from a real run whose endpoint refused connections: it never printed its JSON,
    and its agent timeout struck in backoff. That is the API's failure, not the agent's."""
    report = read_gemini_cli(GEMINI_IN_BACKOFF, None).report
    assert report.api_failure and "fetch failed" in (report.message or "")
    worked_after = GEMINI_IN_BACKOFF + "ls -la\ntotal 0\n"
    assert not read_gemini_cli(worked_after, None).report.api_failure


def test_an_api_failure_the_cli_reported_outranks_its_timeout() -> None:
    log = PhaseLog(
        agent=PhaseResult(timed_out=True),
        report=AgentReport(api_failure=True),
        reward=0.0,
    )
    assert classify(log) is Reason.API_ERROR
    assert classify(PhaseLog(agent=PhaseResult(timed_out=True), reward=0.0)) is (
        Reason.AGENT_TIMEOUT
    )


# Final words of the real CLIs (Claude Code 2.1.332, Codex 0.171.0, Gemini CLI 0.61.0) against
# the scripted model told to fail every call, through the proxy: STATUS@1+, reset@1+.
def _claude_result(**fields: object) -> str:
    base = {"type": "result", "subtype": "success", "is_error": True, "num_turns": 1}
    return json.dumps({**base, "terminal_reason": "api_error", **fields})


def _codex_failed(message: str) -> str:
    return json.dumps({"type": "turn.failed", "error": {"message": message}})


def _gemini_error(message: str, code: int) -> str:
    error = {"type": "Error", "message": message, "code": code}
    return json.dumps({"session_id": "s", "error": error}, indent=2)


BAD_REQUEST_BODY = json.dumps(
    {"error": {"message": "scripted 400 (invalid_request_error)", "type": "invalid_request_error"}}
)
GEMINI_400_BODY = json.dumps(
    {"error": {"code": 400, "message": "scripted 400", "status": "INVALID_ARGUMENT"}}
)
CLAUDE_400 = "API Error: 400 scripted 400 (invalid_request_error)"
CLAUDE_429 = "API Error: Request rejected (429) · scripted 429 (rate_limit_error)"
CLAUDE_NO_ANSWER = "Request timed out. If the API is slow to answer, set API_TIMEOUT_MS above it."
CODEX_429 = "exceeded retry limit, last status: 429 Too Many Requests"
CODEX_5XX = "We’re currently experiencing high demand, which may cause temporary errors."
CODEX_RESET = (
    "stream disconnected before completion: Transport error: network error: error decoding "
    "response body"
)
GEMINI_429 = "scripted 429 (RESOURCE_EXHAUSTED). Please retry in 0s."
FINAL_WORDS = [
    # a context-length-like 400 is the agent's own, on every CLI
    (read_claude_code, _claude_result(api_error_status=400, result=CLAUDE_400), False),
    (read_codex, _codex_failed(BAD_REQUEST_BODY), False),
    (read_gemini_cli, _gemini_error(GEMINI_400_BODY, 400), False),
    # rate limits past the CLI's retries are the API's
    (read_claude_code, _claude_result(api_error_status=429, result=CLAUDE_429), True),
    (read_codex, _codex_failed(CODEX_429), True),
    (read_gemini_cli, _gemini_error(GEMINI_429, 429), True),
    # 5xx past the retries, in Codex's own words
    (read_codex, _codex_failed(CODEX_5XX), True),
    # an answer broken off mid-stream: no status at all, and the API's; Gemini CLI says so
    # with a code of its own (1), not an HTTP status
    (read_claude_code, _claude_result(result=CLAUDE_NO_ANSWER), True),
    (read_codex, _codex_failed(CODEX_RESET), True),
    (read_gemini_cli, _gemini_error("terminated", 1), True),
]


@pytest.mark.parametrize(("reader", "output", "api_failure"), FINAL_WORDS)
def test_each_cli_s_final_words_are_read_with_the_one_rule(
    reader: Any, output: str, api_failure: bool
) -> None:
    assert reader(output, 1).report.api_failure is api_failure
