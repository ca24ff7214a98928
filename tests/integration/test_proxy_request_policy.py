"""What an allowed model call asks the provider to do (`request_policy.py`): tried from the host
against the real proxy, a plain listener (`_witness.py`) as the upstream in front of the scripted
model, so that whatever reaches the upstream is written down.

- A server-side tool that reaches the network is refused for a task without internet, on each
  provider's calls, with the trial's token or without: none reaches the upstream.
- `store` reaches the upstream false; a response id not issued in the trial is refused, one the
  trial was answered with goes; `n` and `candidateCount` above the cap are refused.
- Routing headers (OpenAI-Organization, OpenAI-Project, x-goog-user-project) never reach it.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from levelfield.model_api._http import MAX_BODY_BYTES
from levelfield.model_api.proxy import ModelProxy
from levelfield.model_api.scripted_model import ScriptedModel, serve

from ..hostile._proxy_attacks import send
from ._witness import Witness, routes_to, witness_upstream

REAL_KEY = "sk-levelfield-planted-policy-5a19c2"
HI = [{"role": "user", "content": "hi"}]
GEMINI_HI = [{"role": "user", "parts": [{"text": "hi"}]}]
PATHS = {
    "anthropic": "/anthropic/v1/messages",
    "anthropic-count": "/anthropic/v1/messages/count_tokens",
    "chat": "/openai/chat/completions",
    "responses": "/openai/responses",
    "gemini": "/gemini/v1beta/models/m:generateContent",
    "gemini-stream": "/gemini/v1beta/models/m:streamGenerateContent",
}


@dataclass
class Relay:
    proxy: ModelProxy
    port: int
    witness: Witness

    def post(self, kind: str, doc: dict[str, Any], *, token: bool = True, **headers: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=20)
        sent = {"Content-Type": "application/json", **headers}
        if token:
            sent["x-api-key" if kind.startswith("anthropic") else "Authorization"] = (
                self.proxy.token if kind.startswith("anthropic") else f"Bearer {self.proxy.token}"
            )
            if kind.startswith("gemini"):
                sent = {"Content-Type": "application/json", "x-goog-api-key": self.proxy.token}
                sent.update(headers)
        conn.request("POST", PATHS[kind], body=json.dumps(doc), headers=sent)
        answer = conn.getresponse()
        self.last = answer.read()
        conn.close()
        return answer.status

    def reached(self) -> list[dict[str, Any]]:
        return [json.loads(s.body) for s in self.witness.seen if s.body]


@pytest.fixture
def relay(request: pytest.FixtureRequest) -> Iterator[Relay]:
    internet = getattr(request, "param", False)
    server = serve(ScriptedModel(["echo one"] * 20, require_key=REAL_KEY))
    try:
        with witness_upstream(server.port) as (upstream, witness):
            routes = routes_to(upstream, REAL_KEY)
            with ModelProxy(routes, allow_internet=internet) as proxy:
                yield Relay(proxy, proxy.listen(), witness)
    finally:
        server.stop()


NETWORK_CALLS = [
    ("anthropic", {"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}),
    ("anthropic", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
    ("anthropic", {"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}),
    ("anthropic", {"mcp_servers": [{"type": "url", "url": "https://x.example", "name": "x"}]}),
    ("anthropic-count", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
    ("chat", {"web_search_options": {}}),
    ("responses", {"tools": [{"type": "web_search"}]}),
    ("responses", {"tools": [{"type": "mcp", "server_url": "https://x.example"}]}),
    ("responses", {"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}),
    ("responses", {"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}),
    ("gemini", {"tools": [{"google_search": {}}]}),
    ("gemini", {"tools": [{"urlContext": {}}]}),
    ("gemini-stream", {"tools": [{"code_execution": {}}]}),
]


def _doc(kind: str, extra: dict[str, Any]) -> dict[str, Any]:
    if kind.startswith("gemini"):
        return {"contents": GEMINI_HI, **extra}
    if kind == "responses":
        return {"model": "m", "input": "hi", **extra}
    return {"model": "m", "max_tokens": 8, "messages": HI, **extra}


@pytest.mark.parametrize(("kind", "extra"), NETWORK_CALLS, ids=[k for k, _ in NETWORK_CALLS])
@pytest.mark.parametrize("token", [True, False], ids=["token", "no-token"])
def test_a_network_tool_never_reaches_the_upstream_without_internet(
    relay: Relay, kind: str, extra: dict[str, Any], token: bool
) -> None:
    status = relay.post(kind, _doc(kind, extra), token=token)
    assert status == (400 if token else 401), relay.last
    assert relay.witness.seen == []
    if token:
        refused = relay.proxy.calls
        assert refused and refused[-1].outcome == "refused"


@pytest.mark.parametrize("relay", [True], indirect=True, ids=["internet"])
def test_a_network_tool_goes_when_the_task_allows_internet(relay: Relay) -> None:
    assert relay.post("responses", _doc("responses", {"tools": [{"type": "web_search"}]})) == 200
    assert len(relay.witness.seen) == 1


@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_store_reaches_the_upstream_false(relay: Relay, kind: str) -> None:
    assert relay.post(kind, _doc(kind, {"store": True})) == 200
    assert relay.reached()[-1]["store"] is False


def test_only_a_response_id_of_this_trial_is_relayed(relay: Relay) -> None:
    foreign = {"previous_response_id": "resp_from_another_trial"}
    assert relay.post("responses", _doc("responses", foreign)) == 400
    assert relay.post("responses", _doc("responses", {"conversation": "conv_other"})) == 400
    assert relay.witness.seen == []
    assert relay.post("responses", _doc("responses", {})) == 200
    issued = json.loads(relay.last)["id"]
    assert relay.post("responses", _doc("responses", {"previous_response_id": issued})) == 200
    assert relay.reached()[-1]["previous_response_id"] == issued


@pytest.mark.parametrize(
    ("kind", "extra"),
    [("chat", {"n": 128}), ("gemini", {"generationConfig": {"candidateCount": 8}})],
    ids=["chat-n", "gemini-candidates"],
)
def test_fan_out_past_the_cap_is_refused(relay: Relay, kind: str, extra: dict[str, Any]) -> None:
    assert relay.post(kind, _doc(kind, extra)) == 400
    assert relay.witness.seen == []


def test_routing_headers_never_reach_the_upstream(relay: Relay) -> None:
    routing = {"OpenAI-Organization": "org-x", "OpenAI-Project": "proj-x"}
    assert relay.post("chat", _doc("chat", {}), **routing) == 200
    assert relay.post("gemini", _doc("gemini", {}), **{"x-goog-user-project": "p"}) == 200
    for seen in relay.witness.seen:
        assert not {"openai-organization", "openai-project", "x-goog-user-project"} & set(
            seen.headers
        )


def test_an_oversized_body_is_refused_413_and_never_reaches_the_upstream(relay: Relay) -> None:
    """Refused on its Content-Length, before a byte of it is read."""
    head = (
        f"POST {PATHS['anthropic']} HTTP/1.1\r\nHost: x\r\nx-api-key: {relay.proxy.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n"
    )
    assert send("127.0.0.1", relay.port, head.encode() + b"{") == (413,)
    assert relay.witness.seen == []
    assert relay.proxy.calls[-1].outcome == "refused"
