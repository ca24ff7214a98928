"""The recording proxy carries model calls only, and keeps a trial's model budget: tried from the
host against the real proxy, with a plain listener (`_witness.py`) as the upstream in front of the
scripted model, so that whatever reaches the upstream is written down whatever its path or method.

- Every attempt of `tests/hostile/_proxy_attacks.py` on each provider's route is refused and
  recorded with its method, path and rule; the upstream sees the model calls only, each with the
  real key, and never the client's Host.
- A billed call past a token ceiling is refused in its provider's own error shape, which each
  provider's own SDK reads as a final error; a token count still goes.
- Every billed call is counted: a stream the client closes early is read to its end upstream, a
  streamed Chat Completions request is asked for its usage, a call to an unpriced model or asking
  for per-use tools is refused under a cost ceiling, and no more than IN_FLIGHT calls are in
  flight at once. About 10 s in all.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from levelfield.model_api._http import sse_event
from levelfield.model_api.budget import IN_FLIGHT, Meter
from levelfield.model_api.cost import load_prices
from levelfield.model_api.proxy import ModelProxy, Route
from levelfield.model_api.scripted_model import ScriptedModel, serve
from levelfield.outcome import refusals
from levelfield.records import ApiCall, ModelBudget

from ..hostile._proxy_attacks import CONTROL_HEADER, Attempt, attempts, send
from ._witness import Witness, routes_to, witness_upstream

REAL_KEY = "sk-levelfield-planted-allowlist-3e7d01"
HI = [{"role": "user", "content": "hi"}]
REFUSED_STATUSES = {400, 403, 405, 414}


@dataclass
class Relay:
    proxy: ModelProxy
    urls: dict[str, str]
    port: int
    witness: Witness
    model: ScriptedModel
    upstream: str


def _relay(budget: ModelBudget | None = None, **meter: Any) -> Iterator[Relay]:
    model = ScriptedModel(["echo one"], require_key=REAL_KEY)
    server = serve(model)
    try:
        with witness_upstream(server.port) as (upstream, witness):
            routes = routes_to(upstream, REAL_KEY)
            gauge = Meter(budget or ModelBudget(), **meter)
            with ModelProxy(routes, meter=gauge) as proxy:
                port = proxy.listen()
                yield Relay(proxy, proxy.base_urls(port), port, witness, model, upstream)
    finally:
        server.stop()


@dataclass
class Attacked:
    relay: Relay
    attempts: list[Attempt]
    calls: list[ApiCall]


@pytest.fixture(scope="module")
def attacked() -> Iterator[Attacked]:
    for relay in _relay():
        prefixes = {p: url.rpartition(str(relay.port))[2] for p, url in relay.urls.items()}
        found = attempts(prefixes, relay.proxy.token, f"127.0.0.1:{relay.port}")
        for attempt in found:
            attempt.statuses = send("127.0.0.1", relay.port, attempt.request.encode("latin-1"))
        yield Attacked(relay, found, relay.proxy.calls)


def test_every_attack_is_refused_and_never_reaches_the_upstream(attacked: Attacked) -> None:
    for attempt in attacked.attempts:
        if attempt.control:
            assert attempt.statuses[0] == 200, attempt
            continue
        assert not any(200 <= s < 300 for s in attempt.statuses), attempt
        if "HTTP/0.9" not in attempt.name:  # a 0.9 answer has no status line
            assert set(attempt.statuses) <= REFUSED_STATUSES and attempt.statuses, attempt
    seen = attacked.relay.witness.seen
    controls = [a for a in attacked.attempts if a.control]
    assert len(seen) == len(controls) == 3 * 4  # a model call, a Host, a pipeline, a smuggling
    assert all(CONTROL_HEADER.lower() in s.headers for s in seen), [s.target for s in seen]
    assert {s.credential() for s in seen} == {REAL_KEY}
    assert all(s.method == "POST" for s in seen)
    assert {s.headers["host"] for s in seen} == {attacked.relay.upstream.partition("//")[2]}
    assert "evil.example" not in json.dumps([s.headers for s in seen])


def test_each_refusal_is_recorded_with_its_method_path_and_rule(attacked: Attacked) -> None:
    refused = [c for c in attacked.calls if c.outcome == "refused"]
    relayed = [c for c in attacked.calls if c.outcome != "refused"]
    assert len(relayed) == 3 * 4 and all(c.outcome == "ok" for c in relayed)
    attacks = [a for a in attacked.attempts if not a.control]
    # each attack is one refusal ("two refused pipelined" too: nothing is read after the first);
    # a pipelined or smuggled request behind a carried call is one more each. Past the first
    # REFUSALS_KEPT, a run of refusals in a row is kept as its last, which counts the run.
    assert len(refused) < len(attacks)
    assert all(c.error and "refused attempts in a row" not in c.error for c in refused[:100])
    assert refusals(refused, "refused") == len(attacks) + 2 * 3
    assert all(c.status in REFUSED_STATUSES and c.error for c in refused), refused
    assert all(c.method is not None and c.endpoint is not None for c in refused)
    assert all(REAL_KEY not in c.model_dump_json() for c in attacked.calls)
    token = attacked.relay.proxy.token
    assert all(token not in (c.endpoint or "") for c in refused)  # masked
    rules = {c.error for c in refused}
    assert any("not a model call" in r for r in rules)
    assert any("dot segment" in r for r in rules)
    assert any("percent-encoding" in r for r in rules)
    assert any("must be a path" in r for r in rules)
    assert any("re-route" in r for r in rules)
    _print_table(attacked)


def _print_table(attacked: Attacked) -> None:
    """The refused routes per provider, for the record."""
    print(f"\n{'provider':<10} {'attempt':<70} statuses")
    for attempt in attacked.attempts:
        if not attempt.control:
            name = attempt.name.partition(": ")[2]
            print(f"{attempt.provider:<10} {name[:70]:<70} {attempt.statuses}")


# -- the budget -----------------------------------------------------------------------------


@pytest.fixture
def relay(request: pytest.FixtureRequest) -> Iterator[Relay]:
    budget, meter = getattr(request, "param", (ModelBudget(max_tokens=30), {}))
    yield from _relay(budget, **meter)


def test_a_call_past_the_token_ceiling_is_refused_in_each_providers_own_shape(
    relay: Relay,
) -> None:
    anthropic = pytest.importorskip("anthropic")
    openai = pytest.importorskip("openai")
    genai = pytest.importorskip("google.genai")
    token = relay.proxy.token
    claude = anthropic.Anthropic(api_key=token, base_url=relay.urls["anthropic"], max_retries=0)
    gpt = openai.OpenAI(api_key=token, base_url=relay.urls["openai"], max_retries=0)
    gemini = genai.Client(
        api_key=token, http_options=genai.types.HttpOptions(base_url=relay.urls["gemini"])
    )
    first = gpt.chat.completions.create(model="m", messages=HI * 40)  # crosses 30 tokens
    assert first.usage.prompt_tokens + first.usage.completion_tokens > 30
    with pytest.raises(anthropic.BadRequestError, match="model budget"):
        claude.messages.create(model="m", max_tokens=8, messages=HI)
    with pytest.raises(openai.RateLimitError) as refused:
        gpt.chat.completions.create(model="m", messages=HI)
    assert refused.value.code == "insufficient_quota"
    with pytest.raises(genai.errors.ClientError) as google:
        gemini.models.generate_content(model="gemini-x", contents="hi")
    assert google.value.code == 429 and google.value.status == "RESOURCE_EXHAUSTED"
    assert claude.messages.count_tokens(model="m", messages=HI).input_tokens > 0  # free: goes
    calls = relay.proxy.calls
    assert [c.outcome for c in calls] == ["ok", *["budget_exhausted"] * 3, "ok"]
    assert [c.status for c in calls[1:4]] == [400, 429, 429]
    assert "of a ceiling of 30 tokens" in (calls[-2].error or "")
    assert len(relay.witness.seen) == 2  # the refused calls never left the proxy


@pytest.mark.parametrize(
    "relay", [(ModelBudget(max_tokens=10_000_000), {})], indirect=True, ids=["budget"]
)
def test_a_chat_stream_is_asked_for_its_usage_so_that_it_counts(relay: Relay) -> None:
    openai = pytest.importorskip("openai")
    gpt = openai.OpenAI(api_key=relay.proxy.token, base_url=relay.urls["openai"], max_retries=0)
    chunks = list(gpt.chat.completions.create(model="m", messages=HI * 50, stream=True))
    assert chunks[-1].usage is not None  # the SDK reads the usage chunk it did not ask for
    (asked,) = [json.loads(s.body) for s in relay.witness.seen]
    assert asked["stream_options"] == {"include_usage": True}
    spend = relay.proxy.meter.spend()
    assert spend.estimated_tokens == 0 and spend.tokens == sum(
        (c.tokens_in or 0) + (c.tokens_out or 0) for c in relay.proxy.calls
    )


class _SlowStream(BaseHTTPRequestHandler):
    """An Anthropic stream whose usage comes at its end, a second after its start."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # http.server's name for it
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        start = {"type": "message_start", "message": {"usage": {"input_tokens": 1000}}}
        events = [sse_event(start, "message_start")]
        events += [sse_event({"type": "ping"}, "ping") for _ in range(20)]
        delta = {"type": "message_delta", "usage": {"output_tokens": 500}}
        events += [sse_event(delta, "message_delta"), sse_event({"type": "message_stop"})]
        for number, event in enumerate(events):
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
            time.sleep(1.0 if number == 0 else 0.02)
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


def test_a_stream_the_agent_leaves_is_read_to_its_end_so_that_its_usage_counts() -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _SlowStream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    route = Route("anthropic", f"http://127.0.0.1:{upstream.server_address[1]}")
    try:
        with ModelProxy([route], meter=Meter(ModelBudget(max_tokens=10**6))) as proxy:
            port = proxy.listen()
            body = json.dumps({"model": "m", "max_tokens": 9, "messages": HI, "stream": True})
            head = (
                f"POST /anthropic/v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {proxy.token}"
                f"\r\nContent-Length: {len(body)}\r\n\r\n"
            )
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(head.encode() + body.encode())
                seen = b""
                while b"message_start" not in seen:
                    seen += sock.recv(4096)
            deadline = time.monotonic() + 10  # the agent goes on; its next call would see this
            while proxy.meter.spend().tokens < 1500 and time.monotonic() < deadline:
                time.sleep(0.05)
            spend = proxy.meter.spend()
            (call,) = proxy.calls
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert call.outcome == "cut_short" and (call.tokens_in, call.tokens_out) == (1000, 500)
    assert (spend.tokens, spend.estimated_tokens) == (1500, 0)


@pytest.mark.parametrize(
    "relay",
    [(ModelBudget(max_cost_usd=1.0), {"prices": load_prices(), "model": "gpt-5"})],
    indirect=True,
    ids=["cost"],
)
def test_under_a_cost_ceiling_uncountable_calls_are_refused(relay: Relay) -> None:
    openai = pytest.importorskip("openai")
    relay.proxy.allow_internet = True  # without it a server-side tool is refused before the budget
    gpt = openai.OpenAI(api_key=relay.proxy.token, base_url=relay.urls["openai"], max_retries=0)
    gpt.chat.completions.create(model="gpt-5-2025-08-07", messages=HI)  # a snapshot: priced
    with pytest.raises(openai.PermissionDeniedError, match="no price"):
        gpt.chat.completions.create(model="o3-pro", messages=HI)
    with pytest.raises(openai.PermissionDeniedError, match="billed per use"):
        gpt.responses.create(model="gpt-5", input="hi", tools=[{"type": "web_search"}])
    with pytest.raises(openai.PermissionDeniedError, match="background"):
        gpt.responses.create(model="gpt-5", input="hi", background=True)
    spend = relay.proxy.meter.spend()
    assert 0 < spend.cost_usd < 0.01
    assert [c.outcome for c in relay.proxy.calls] == ["ok", "refused", "refused", "refused"]


@pytest.mark.parametrize(
    "relay", [(ModelBudget(max_tokens=10_000_000), {})], indirect=True, ids=["budget"]
)
def test_no_more_than_in_flight_calls_at_once_under_a_budget(relay: Relay) -> None:
    """Calls that hang upstream hold their places: the next ones wait, none is lost."""
    from levelfield.model_api.scripted_model import Failure

    relay.model.failures = [Failure(None, 1, persistent=True, kind="hang")]
    threads = [
        threading.Thread(target=_stream_and_leave_quietly, args=(relay,), daemon=True)
        for _ in range(IN_FLIGHT + 3)
    ]
    for thread in threads:
        thread.start()
    time.sleep(2)
    assert relay.model.calls == IN_FLIGHT  # the rest wait for a place


def _stream_and_leave_quietly(relay: Relay) -> None:
    body = json.dumps({"model": "m", "messages": HI}).encode()
    head = (
        f"POST /openai/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        f"{relay.proxy.token}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        with contextlib.suppress(OSError):
            sock.recv(64)
