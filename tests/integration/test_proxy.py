"""The recording proxy between the real `anthropic`, `openai` and `google-genai` SDKs and the
scripted model, on loopback: each API, streamed or not, is parsed by the SDK (not by us), and the
proxy's record of the call must agree with what the SDK read. Then: the key swap (wherever the
client put its token), a stranger's token, retries of a 429, server errors, and a listener inside
a network namespace that the host cannot reach. About 10 s in all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from levelfield.model_api.proxy import ModelProxy, Route
from levelfield.model_api.scripted_model import Failure, ScriptedModel, serve

REAL_KEY = "sk-real-proxy-test-8f1c2d"
COMMANDS = ["echo one", "echo two"]
BASH = {"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {}}}}
SHELL = {
    "type": "function",
    "function": {
        "name": "shell",
        "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
    },
}
EXEC = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel(list(COMMANDS), require_key=REAL_KEY)


@contextmanager
def proxy_to(
    model: ScriptedModel, conversation: Path, key: str = REAL_KEY
) -> Iterator[tuple[ModelProxy, dict[str, str]]]:
    """The scripted model on loopback, and a proxy in front of it for every provider."""
    server = serve(model)
    upstream = f"http://127.0.0.1:{server.port}"
    routes = [
        Route("anthropic", upstream, SecretStr(key)),
        Route("openai", upstream + "/v1", SecretStr(key)),
        Route("gemini", upstream, SecretStr(key)),
    ]
    try:
        with ModelProxy(routes, conversation=conversation) as proxy:
            yield proxy, proxy.base_urls(proxy.listen())
    finally:
        server.stop()


@pytest.fixture
def proxy(model: ScriptedModel, tmp_path: Path) -> Iterator[tuple[ModelProxy, dict[str, str]]]:
    with proxy_to(model, tmp_path / "conversation.jsonl") as relayed:
        yield relayed


def _anthropic(urls: dict[str, str], token: str, retries: int = 0) -> Any:
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(api_key=token, base_url=urls["anthropic"], max_retries=retries)


def _openai(urls: dict[str, str], token: str, retries: int = 0) -> Any:
    openai = pytest.importorskip("openai")
    return openai.OpenAI(api_key=token, base_url=urls["openai"], max_retries=retries)


def _ask_every_api(urls: dict[str, str], token: str) -> list[tuple[int, int, str]]:
    """(tokens in, tokens out, the command) as each SDK read them, streamed and not."""
    client, seen = _anthropic(urls, token), []
    hi = [{"role": "user", "content": "hi"}]
    reply = client.messages.create(model="m", max_tokens=9, messages=hi, tools=[BASH])
    seen.append((reply.usage.input_tokens, reply.usage.output_tokens, reply.content[0].input))
    with client.messages.stream(model="m", max_tokens=9, messages=hi, tools=[BASH]) as stream:
        reply = stream.get_final_message()
    seen.append((reply.usage.input_tokens, reply.usage.output_tokens, reply.content[0].input))
    oai = _openai(urls, token)
    chat = oai.chat.completions.create(model="m", messages=hi, tools=[SHELL])
    call = chat.choices[0].message.tool_calls[0].function
    seen.append((chat.usage.prompt_tokens, chat.usage.completion_tokens, call.arguments))
    chunks = list(
        oai.chat.completions.create(
            model="m",
            messages=hi,
            tools=[SHELL],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usage = chunks[-1].usage
    arguments = "".join(
        c.choices[0].delta.tool_calls[0].function.arguments or ""
        for c in chunks
        if c.choices and c.choices[0].delta.tool_calls
    )
    seen.append((usage.prompt_tokens, usage.completion_tokens, arguments))
    response = oai.responses.create(model="m", input="hi", tools=[EXEC])
    usage = response.usage
    seen.append((usage.input_tokens, usage.output_tokens, response.output[0].arguments))
    with oai.responses.stream(model="m", input="hi", tools=[EXEC]) as stream:
        response = stream.get_final_response()
    usage = response.usage
    seen.append((usage.input_tokens, usage.output_tokens, response.output[0].arguments))
    return seen


def test_every_api_streamed_or_not_is_relayed_and_recorded_as_the_sdk_read_it(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel, tmp_path: Path
) -> None:
    relay, urls = proxy
    seen = _ask_every_api(urls, relay.token)
    assert all("echo one" in json.dumps(command) for _, _, command in seen)
    calls = relay.calls
    assert [(c.tokens_in, c.tokens_out) for c in calls] == [(i, o) for i, o, _ in seen]
    assert [c.endpoint for c in calls] == ["/v1/messages"] * 2 + ["/chat/completions"] * 2 + [
        "/responses"
    ] * 2
    assert [c.streamed for c in calls] == [False, True] * 3
    assert all(c.status == 200 and c.outcome == "ok" and c.attempt == 1 for c in calls)
    assert all(c.first_token_s is not None and c.first_token_s <= c.latency_s for c in calls)
    assert model.keys_seen == [REAL_KEY] * 6  # the proxy swapped the token for the key
    steps = relay.trajectory()
    assert [s["command"] for s in steps] == ["echo one"] * 6
    assert [s["tool"] for s in steps] == ["Bash"] * 2 + ["shell"] * 2 + ["exec_command"] * 2
    text = (tmp_path / "conversation.jsonl").read_text()
    assert len(text.splitlines()) == 6
    assert REAL_KEY not in text and relay.token not in text


def test_calls_ending_together_are_written_in_the_order_they_are_recorded(
    proxy: tuple[ModelProxy, dict[str, str]], tmp_path: Path
) -> None:
    """A CLI may have two calls in flight (Codex does): conversation.jsonl lists them in the
    order of the trial's calls, one line each."""
    from concurrent.futures import ThreadPoolExecutor

    relay, urls = proxy
    client = _openai(urls, relay.token)
    hi = [{"role": "user", "content": "hi"}]
    with ThreadPoolExecutor(16) as pool:
        for _ in range(4):
            list(
                pool.map(
                    lambda _: client.chat.completions.create(model="m", messages=hi), range(16)
                )
            )
    lines = (tmp_path / "conversation.jsonl").read_text().splitlines()
    assert [json.loads(line)["call"] for line in lines] == [c.model_dump() for c in relay.calls]
    assert len(lines) == 64


def test_a_request_without_the_trials_token_is_refused_and_never_relayed(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    relay, urls = proxy
    anthropic = pytest.importorskip("anthropic")
    for token in ("sk-guessed", REAL_KEY):  # not even the real key opens it
        with pytest.raises(anthropic.AuthenticationError):
            _anthropic(urls, token).messages.create(
                model="m", max_tokens=9, messages=[{"role": "user", "content": "hi"}]
            )
    assert relay.refused == 2 and model.calls == 0 and relay.calls == []


def test_an_sdk_retrying_a_429_is_seen_as_attempts_with_the_retry_after(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    relay, urls = proxy
    model.failures, model.retry_after_s = [Failure(429, 1), Failure(429, 2)], 0.05
    reply = _openai(urls, relay.token, retries=2).responses.create(
        model="m", input="hi", tools=[EXEC]
    )
    assert reply.output[0].name == "exec_command"
    got = [(c.status, c.outcome, c.attempt, c.retry_after_s) for c in relay.calls]
    assert got == [
        (429, "rate_limited", 1, 0.05),
        (429, "rate_limited", 2, 0.05),
        (200, "ok", 3, None),
    ]


@pytest.mark.parametrize(
    ("status", "outcome"), [(500, "server_error"), (529, "overloaded"), (401, "client_error")]
)
def test_error_answers_are_recorded_with_their_status(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel, status: int, outcome: str
) -> None:
    relay, urls = proxy
    model.failures = [Failure(status, 1)]
    with pytest.raises(Exception, match=str(status)):
        _anthropic(urls, relay.token).messages.create(
            model="m", max_tokens=9, messages=[{"role": "user", "content": "hi"}]
        )
    (call,) = relay.calls
    assert (call.status, call.outcome, call.tokens_in, call.first_token_s) == (
        status,
        outcome,
        None,
        None,
    )


def test_an_unreachable_upstream_is_a_connection_error(tmp_path: Path) -> None:
    with ModelProxy([Route("openai", "http://127.0.0.1:9/v1")]) as relay:
        urls = relay.base_urls(relay.listen())
        with pytest.raises(Exception, match="502"):
            _openai(urls, relay.token).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
    (call,) = relay.calls
    assert (call.status, call.outcome) == (None, "connection_error")


@pytest.mark.sandbox
def test_the_listener_is_on_the_loopback_of_the_sandboxs_namespace_only(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    if os.geteuid() != 0:
        pytest.skip("entering a network namespace needs root")
    relay, _ = proxy
    holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up; exec sleep 60"])
    try:
        netns = Path(f"/proc/{holder.pid}/ns/net")
        for _ in range(500):  # until sh has brought the loopback up and become sleep
            if Path(f"/proc/{holder.pid}/comm").read_text().strip() == "sleep":
                break
            subprocess.run(["sleep", "0.01"], check=True)
        port = relay.listen(netns)
        probe = (
            "import json, sys, urllib.request as u\n"
            f"r = u.Request('http://127.0.0.1:{port}/openai/chat/completions', "
            "data=json.dumps({'model': 'm', 'messages': []}).encode(), "
            "headers={'Authorization': 'Bearer ' + sys.argv[1], 'Content-Type': "
            "'application/json'})\n"
            "print(json.load(u.urlopen(r, timeout=10))['object'])\n"
        )
        inside = subprocess.run(
            ["nsenter", "-t", str(holder.pid), "-n", sys.executable, "-c", probe, relay.token],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert inside.stdout.strip() == "chat.completion", inside.stderr
        outside = subprocess.run(
            [sys.executable, "-c", probe, relay.token], capture_output=True, text=True, timeout=60
        )
        # Refused, unless another process of the host holds that port number on its own
        # loopback: the relay's own count below says the probe never reached it.
        assert outside.returncode != 0, outside.stdout
    finally:
        holder.kill()
        holder.wait()
    assert model.calls == 1 and len(relay.calls) == 1


def test_side_requests_get_answers_in_their_protocols_shape(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    """A title or summary request offers no shell tool; token counting has its own endpoint."""
    relay, urls = proxy
    client = _anthropic(urls, relay.token)
    hi = [{"role": "user", "content": "Write a 5-word title for this conversation."}]
    title = client.messages.create(model="m", max_tokens=20, messages=hi)
    assert title.stop_reason == "end_turn" and title.content[0].text
    counted = client.messages.count_tokens(model="m", messages=hi)
    assert counted.input_tokens > 0
    summary = _openai(urls, relay.token).chat.completions.create(model="m", messages=hi)
    assert summary.choices[0].finish_reason == "stop" and summary.choices[0].message.content
    assert [c.endpoint for c in relay.calls] == [
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/chat/completions",
    ]
    assert relay.trajectory() == []  # no tool call, no step


GEMINI_SHELL = {
    "name": "run_shell_command",
    "parameters": {"type": "OBJECT", "properties": {"command": {"type": "STRING"}}},
}


def test_gemini_streamed_or_not_is_relayed_with_the_key_put_where_the_token_was(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    """Google's SDK sends its key in x-goog-api-key; its REST form also takes `key=`. Either
    way the scripted model gets the real key, and the SDK reads the answer it expects."""
    genai = pytest.importorskip("google.genai")
    types = genai.types
    relay, urls = proxy
    client = genai.Client(
        api_key=relay.token, http_options=types.HttpOptions(base_url=urls["gemini"])
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[types.FunctionDeclaration(**GEMINI_SHELL)])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    whole = client.models.generate_content(model="gemini-x", contents="hi", config=config)
    chunks = list(
        client.models.generate_content_stream(model="gemini-x", contents="hi", config=config)
    )
    seen = [whole.function_calls[0].args, chunks[-1].function_calls[0].args]
    assert seen == [{"command": "echo one"}] * 2
    counted = client.models.count_tokens(model="gemini-x", contents="hi")
    assert counted.total_tokens > 0
    query = f"{urls['gemini']}/v1beta/models/gemini-x:generateContent?key={relay.token}"
    body = json.dumps({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()
    request = urllib.request.Request(query, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.load(answer)["candidates"][0]["content"]["parts"][0]["text"]
    calls = relay.calls
    assert [(c.endpoint or "").rpartition("/models/")[2] for c in calls] == [
        "gemini-x:generateContent",
        "gemini-x:streamGenerateContent",
        "gemini-x:countTokens",
        "gemini-x:generateContent",
    ]
    assert [c.streamed for c in calls] == [False, True, False, False]
    assert all(c.status == 200 and c.outcome == "ok" for c in calls)
    usage = whole.usage_metadata
    assert (calls[0].tokens_in, calls[0].tokens_out) == (
        usage.prompt_token_count,
        usage.candidates_token_count,
    )
    assert model.keys_seen == [REAL_KEY] * 4  # header or query, the token became the key
    assert [s["tool"] for s in relay.trajectory()] == ["run_shell_command"] * 2


def test_account_headers_the_agent_sets_never_reach_the_upstream(
    proxy: tuple[ModelProxy, dict[str, str]], model: ScriptedModel
) -> None:
    """The SDKs send the organization and project they are given (OPENAI_ORG_ID, a header of the
    agent's own): which account a call is billed to is the harness's key's, so a foreign one
    cannot make the upstream refuse the call (a 401 booked as `api_error`). The call itself
    goes through, with the rest of its headers."""
    openai = pytest.importorskip("openai")
    relay, urls = proxy
    client = openai.OpenAI(
        api_key=relay.token, base_url=urls["openai"], max_retries=0,
        organization="org-foreign", project="proj-foreign",
        default_headers={"X-Goog-User-Project": "foreign", "Anthropic-Organization": "foreign",
                         "X-Agent-Note": "kept"},
    )  # fmt: skip
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    (seen,) = model.headers_seen
    account = {"openai-organization", "openai-project", "x-goog-user-project"}
    assert not account & seen.keys() and "anthropic-organization" not in seen, seen
    assert seen["x-agent-note"] == "kept" and seen["authorization"] == f"Bearer {REAL_KEY}"
    (call,) = relay.calls
    assert call.outcome == "ok"
