"""The proxy records each failed call as what it was, so that the outcome can see it: a stream
reset mid-way, an error event inside a 200 stream (Anthropic's, the Responses API's
`response.failed`, an error chunk of Chat Completions and Gemini), a call the agent gave up on,
and a call still in flight when the agent ended. The scripted model fails for real on loopback
(a TCP reset, the protocol's own error event, no answer at all); the clients are the real SDKs
where they stream, plain HTTP where the point is the bytes. About 10 s."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from levelfield.model_api.proxy import ModelProxy
from levelfield.model_api.scripted_model import Failure, ScriptedModel

from .test_proxy import proxy_to

REAL_KEY = "sk-real-proxy-failures-41c7aa"
EXEC = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
HI = [{"role": "user", "content": "hi"}]
BASH = {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {}}}}


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(["echo one"])


@pytest.fixture
def proxy(model: ScriptedModel, tmp_path: Path) -> Iterator[tuple[ModelProxy, dict[str, str]]]:
    with proxy_to(model, tmp_path / "conversation.jsonl", REAL_KEY) as relayed:
        yield relayed


def _post(url: str, token: str, body: dict[str, Any], timeout_s: float = 30) -> bytes:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s) as answer:
        return bytes(answer.read())


def test_a_stream_reset_midway_is_no_answer_and_its_resend_the_next_attempt(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    openai = pytest.importorskip("openai")
    relay, urls = proxy
    model.failures = [Failure.parse("reset@1")]
    client = openai.OpenAI(api_key=relay.token, base_url=urls["openai"], max_retries=0)
    broken = client.responses.stream(model="m", input="hi", tools=[EXEC])
    with pytest.raises(openai.APIError), broken as stream:
        stream.get_final_response()
    with client.responses.stream(model="m", input="hi", tools=[EXEC]) as stream:
        assert stream.get_final_response().output[0].name == "exec_command"
    broken, ok = relay.calls
    assert (broken.status, broken.outcome, broken.attempt) == (200, "connection_error", 1)
    assert "broken off" in (broken.error or "") and broken.first_token_s is None
    assert (ok.status, ok.outcome, ok.attempt) == (200, "ok", 2)
    assert len(relay.trajectory()) == 1  # the broken answer's tool call never counts


GEMINI_SSE = "/v1beta/models/g:streamGenerateContent?alt=sse"


@pytest.mark.parametrize(
    ("api", "path", "body", "outcome"),
    [
        ("anthropic", "/v1/messages", {"stream": True, "messages": HI}, "overloaded"),
        ("openai", "/responses", {"stream": True, "input": "hi", "tools": [EXEC]}, "server_error"),
        ("openai", "/chat/completions", {"stream": True, "messages": HI}, "overloaded"),
        ("gemini", GEMINI_SSE, {"contents": []}, "server_error"),
    ],
)  # fmt: skip
def test_an_error_event_inside_a_200_stream_is_recorded_as_that_failure(
    proxy: tuple[ModelProxy, dict[str, str]],
    model: ScriptedModel,
    api: str,
    path: str,
    body: dict[str, Any],
    outcome: str,
) -> None:
    relay, urls = proxy
    model.failures = [Failure.parse("stream-error@1+")]
    raw = _post(urls[api] + path, relay.token, {"model": "m", **body})
    assert b"error" in raw  # the agent got the stream as the API sent it
    (call,) = relay.calls
    assert (call.status, call.outcome, call.streamed) == (200, outcome, True)
    assert (call.error or "").startswith("error in the answer after 200")


def test_the_anthropic_sdk_sees_the_overload_the_proxy_records(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    anthropic = pytest.importorskip("anthropic")
    relay, urls = proxy
    model.failures = [Failure.parse("stream-error@1")]
    client = anthropic.Anthropic(api_key=relay.token, base_url=urls["anthropic"], max_retries=0)
    overloaded = client.messages.stream(model="m", max_tokens=9, messages=HI, tools=[BASH])
    with pytest.raises(anthropic.APIStatusError, match="verloaded"), overloaded as s:
        s.get_final_message()
    with client.messages.stream(model="m", max_tokens=9, messages=HI, tools=[BASH]) as s:
        assert s.get_final_message().stop_reason == "tool_use"
    assert [(c.outcome, c.attempt) for c in relay.calls] == [("overloaded", 1), ("ok", 2)]


def test_a_call_the_agent_gave_up_on_is_cut_short_and_not_waited_for(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    """The upstream never answers; the client's own timeout ends the call, as an agent's
    deadline does. The call was dropped, after a 30 s wait, before; it is the agent's doing."""
    relay, urls = proxy
    model.failures = [Failure.parse("hang@1")]
    with pytest.raises((TimeoutError, socket.timeout)):
        _post(urls["openai"] + "/chat/completions", relay.token, {"messages": HI}, timeout_s=1)
    t0 = time.monotonic()
    (call,) = relay.calls
    assert time.monotonic() - t0 < 5
    assert (call.status, call.outcome) == (None, "cut_short")
    assert "closed its connection" in (call.error or "")


def test_a_call_still_in_flight_when_the_agent_ends_is_recorded_not_dropped(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    relay, urls = proxy
    model.failures = [Failure.parse("hang@1")]
    url = urls["gemini"] + "/v1beta/models/g:generateContent"
    def wait_for_an_answer() -> None:
        with contextlib.suppress(OSError):  # the proxy closes it when the test ends
            _post(url, relay.token, {}, 60)

    threading.Thread(target=wait_for_an_answer, daemon=True).start()
    for _ in range(200):  # until the proxy has the call in flight
        if model.calls:
            break
        time.sleep(0.02)
    (call,) = relay.log.settle(timeout_s=1.0)  # the agent's run ended with the call open
    assert (call.status, call.outcome, call.endpoint) == (
        None,
        "cut_short",
        "/v1beta/models/g:generateContent",
    )
    assert "when the agent ended" in (call.error or "")
    relay.close()
