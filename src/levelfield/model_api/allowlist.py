"""What the recording proxy carries: each provider's model calls, each with its method. Anything
else an agent sends is refused with the rule it broke, recorded as the agent's attempt, and never
reaches the upstream, where the user's key would open it (the organisation's files, batches,
fine-tuning jobs, vector stores, cached contents, admin endpoints).

A request-target is not normalised and then matched: it must already be in the one form the
clients send. Origin-form only (`/openai/responses`; never `http://host/...`, `host:443` or `*`);
letters, digits and `._~:-` between single slashes; no percent-encoding, no empty, `.` or `..`
segment, no fragment. Every normaliser differs from the upstream's somewhere (`%2e%2e`, `%2f`,
`..;/`, a backslash, a doubled slash, a case-folding server), and that difference is the attack,
so a target that would need normalising is refused instead. The path after the provider's prefix
must then be one of the provider's endpoints, whole and case for case, with its method; the query
may carry only the parameters those endpoints take, each once, with a plain value; no header may
re-route the request upstream (a method override, X-Original-URL, Forwarded) or be folded over
several lines. The client's Host header never goes upstream: the proxy names the upstream itself
(`proxy.HOP_HEADERS`).

The endpoints are those the agents use (Claude Code, Codex, Gemini CLI, the SDKs): Anthropic
Messages and its token counting; OpenAI Chat Completions, Responses and the model list;
Gemini generateContent, streamGenerateContent and countTokens.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

MAX_TARGET_CHARS = 1024  # the longest model-call target is a Gemini path with its key, < 200
PATH = re.compile(r"(?:/[A-Za-z0-9._~:-]+)+")
PLAIN_VALUE = re.compile(r"[A-Za-z0-9._-]*")
GEMINI = r"/(?:v1|v1beta|v1alpha)/models/(?P<model>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
# A header that asks a server to take another method or path than the request line's.
REROUTING_HEADERS = (
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
    "x-original-url",
    "x-original-uri",
    "x-rewrite-url",
    "x-forwarded-host",
    "x-forwarded-prefix",
    "x-forwarded-path",
    "forwarded",
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One model call of a provider: `billed` when its answer costs tokens (a token count or
    a model list does not); `params` the query parameters its clients send."""

    name: str
    method: str
    path: re.Pattern[str]
    billed: bool = True
    params: frozenset[str] = frozenset()


def _endpoint(
    name: str, method: str, path: str, *, billed: bool = True, params: tuple[str, ...] = ()
) -> Endpoint:
    return Endpoint(name, method, re.compile(path), billed, frozenset(params))


ENDPOINTS: Mapping[str, tuple[Endpoint, ...]] = {
    "anthropic": (  # Claude Code adds ?beta=true
        _endpoint("POST /v1/messages", "POST", r"/v1/messages", params=("beta",)),
        _endpoint(
            "POST /v1/messages/count_tokens",
            "POST",
            r"/v1/messages/count_tokens",
            billed=False,
            params=("beta",),
        ),
    ),
    "openai": (  # relative to the base URL, which ends in /v1 (Azure's takes api-version)
        _endpoint("POST /chat/completions", "POST", r"/chat/completions", params=("api-version",)),
        _endpoint("POST /responses", "POST", r"/responses", params=("api-version",)),
        _endpoint(
            "GET /models", "GET", r"/models", billed=False, params=("api-version", "client_version")
        ),
    ),
    "gemini": (  # the key may ride in key=; streams ask alt=sse
        _endpoint(
            "POST /v1beta/models/MODEL:generateContent",
            "POST",
            GEMINI + r":generateContent",
            params=("key", "alt"),
        ),
        _endpoint(
            "POST /v1beta/models/MODEL:streamGenerateContent",
            "POST",
            GEMINI + r":streamGenerateContent",
            params=("key", "alt"),
        ),
        _endpoint(
            "POST /v1beta/models/MODEL:countTokens",
            "POST",
            GEMINI + r":countTokens",
            billed=False,
            params=("key", "alt"),
        ),
    ),
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is not carried: the rule, in words the agent and the record both get."""

    rule: str
    status: int = 403


@dataclass(frozen=True, slots=True)
class Admitted:
    """A model call the proxy carries: its provider, its endpoint, the path after the provider's
    prefix (with the query as sent), and the model its path names (Gemini's)."""

    provider: str
    endpoint: Endpoint
    path: str
    model: str | None = None


def admit(
    method: str, target: str, headers: Mapping[str, str], routed: Collection[str]
) -> Admitted | Refusal:
    """The call `target` asks for, if the proxy carries it for one of the `routed` providers."""
    refusal = _target_refusal(target)
    if refusal is not None:
        return refusal
    path, _, query = target.partition("?")
    provider, _, rest = path[1:].partition("/")
    if provider not in routed:
        return Refusal(f"no route /{provider}: this proxy relays {_names(routed)}")
    rest = "/" + rest
    matches = [(e, e.path.fullmatch(rest)) for e in ENDPOINTS.get(provider, ())]
    found = [(e, m) for e, m in matches if m is not None]
    if not found:
        carried = "; ".join(e.name for e in ENDPOINTS.get(provider, ()))
        return Refusal(f"{rest} is not a model call: {provider} carries only {carried}")
    endpoint, match = next(((e, m) for e, m in found if e.method == method), (None, None))
    if endpoint is None or match is None:
        methods = " or ".join(sorted({e.method for e, _ in found}))
        return Refusal(f"method {method[:20]!r} on {rest}: only {methods}", status=405)
    refusal = _query_refusal(query, endpoint) or _header_refusal(headers)
    if refusal is not None:
        return refusal
    model = match.groupdict().get("model")
    return Admitted(provider, endpoint, target[len(provider) + 1 :], model)


def body_refusal(admitted: Admitted, body: object) -> Refusal | None:
    """A model call that would start work outliving it: a background response (the Responses
    API's `background`) runs and bills after its call has ended, read at GET /responses/ID."""
    is_responses = admitted.endpoint.name == "POST /responses"
    if is_responses and isinstance(body, dict) and body.get("background"):
        return Refusal("a background response runs and bills after its call has ended")
    return None


def _target_refusal(target: str) -> Refusal | None:
    if not target.startswith("/"):
        return Refusal("the request-target must be a path (/PROVIDER/...), not a URL or host")
    if len(target) > MAX_TARGET_CHARS:
        return Refusal(f"request-target longer than {MAX_TARGET_CHARS} characters", status=414)
    path = target.partition("?")[0]
    if "#" in target:
        return Refusal("a fragment (#) in the request-target")
    if "%" in path:
        return Refusal("percent-encoding in the path (%2e, %2f...): paths are carried as sent")
    if PATH.fullmatch(path) is None:
        if "//" in path or path.endswith("/"):
            return Refusal("an empty path segment (// or a trailing /)")
        return Refusal("a character other than letters, digits and ._~:- in a path segment")
    if any(segment in (".", "..") for segment in path.split("/")):
        return Refusal("a dot segment (. or ..) in the path")
    return None


def _query_refusal(query: str, endpoint: Endpoint) -> Refusal | None:
    if not query:
        return None
    seen: set[str] = set()
    for piece in query.split("&"):
        name, _, value = piece.partition("=")
        if name not in endpoint.params:
            allowed = ", ".join(sorted(endpoint.params)) or "none"
            return Refusal(f"query parameter {name[:40]!r} (carried: {allowed})")
        if name in seen:
            return Refusal(f"query parameter {name!r} given twice")
        if PLAIN_VALUE.fullmatch(value) is None:
            return Refusal(f"query parameter {name!r} with a value other than letters, digits, ._-")
        seen.add(name)
    return None


def _header_refusal(headers: Mapping[str, str]) -> Refusal | None:
    for name in REROUTING_HEADERS:
        if headers.get(name) is not None:
            return Refusal(f"header {name} would re-route the request upstream")
    for name, value in headers.items():
        if "\r" in value or "\n" in value:  # obs-fold: each server unfolds it its own way
            return Refusal(f"header {name[:40]} folded over several lines")
    return None


def _names(routed: Collection[str]) -> str:
    return ", ".join(f"/{name}" for name in sorted(routed)) or "nothing"
