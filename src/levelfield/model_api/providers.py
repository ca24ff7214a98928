"""The model providers the proxy relays, and how each one's clients carry a key.

Anthropic's Messages API takes `x-api-key` (or a bearer token), OpenAI's APIs a bearer token
(Azure's `api-key`), Google's Gemini API `x-goog-api-key` or a `key=` query parameter. The proxy
finds the trial's dummy token wherever the client put it and puts the real key in the same
place, so one relay serves every client, whatever its provider or SDK.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Provider = Literal["anthropic", "openai", "gemini"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai", "gemini")
OFFICIAL_BASE_URL: dict[Provider, str] = {
    "anthropic": "https://api.anthropic.com",  # the SDK appends /v1/messages
    "openai": "https://api.openai.com/v1",  # the SDKs append /responses, /chat/completions
    "gemini": "https://generativelanguage.googleapis.com",  # the SDK appends /v1beta/models/...
}
# The variable each provider's SDKs and CLIs read their base URL from.
BASE_URL_ENV: dict[Provider, str] = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
}
# A key variable names its provider; an agent whose key variable says nothing gets every one.
PROVIDER_OF_KEY_ENV: dict[str, Provider] = {
    "ANTHROPIC_API_KEY": "anthropic",
    "OPENAI_API_KEY": "openai",
    "CODEX_API_KEY": "openai",
    "GEMINI_API_KEY": "gemini",
    "GOOGLE_API_KEY": "gemini",
}
KEY_HEADERS = ("x-api-key", "api-key", "x-goog-api-key")  # the key alone, as the value
BEARER_HEADER = "authorization"
KEY_QUERY = "key"  # Google's API also takes the key in the query string
# Never relayed as the client sent them: a credential goes upstream only as the real key.
SECRET_HEADERS = frozenset({*KEY_HEADERS, BEARER_HEADER, "cookie", "proxy-authorization"})
# Which account, project or quota a call is billed to: the harness's key decides that, never
# the agent. Relayed, a foreign organization makes the upstream answer 401/403 to a call that
# the harness's own request would have had answered: an agent's failure booked as `api_error`.
ACCOUNT_HEADERS = frozenset(
    {"openai-organization", "openai-project", "x-goog-user-project", "anthropic-organization"}
)


def providers_for(key_env: str | None) -> tuple[Provider, ...]:
    provider = PROVIDER_OF_KEY_ENV.get(key_env or "")
    return (provider,) if provider is not None else PROVIDERS


@dataclass(frozen=True, slots=True)
class Credentials:
    """Where a request carried a credential, and what it was."""

    headers: dict[str, str]  # lower-case header name → the value as a key (bearer stripped)
    query: str | None  # the `key=` parameter

    @classmethod
    def of(cls, headers: Mapping[str, str], query: str) -> Credentials:
        found = {name: headers[name] for name in KEY_HEADERS if headers.get(name)}
        bearer = headers.get(BEARER_HEADER) or ""
        if bearer.lower().startswith("bearer "):
            found[BEARER_HEADER] = bearer[7:].strip()
        keys = urllib.parse.parse_qs(query).get(KEY_QUERY)
        return cls(found, keys[0] if keys else None)

    def values(self) -> list[str]:
        return [*self.headers.values(), *([self.query] if self.query is not None else [])]


def with_key(
    headers: dict[str, str], query: str, given: Credentials, key: str | None
) -> tuple[dict[str, str], str]:
    """The upstream request's headers and query: every credential and account header the client
    sent removed, and the real key put where it had put its token. No key (a local server): no
    credential."""
    dropped = SECRET_HEADERS | ACCOUNT_HEADERS
    upstream = {k: v for k, v in headers.items() if k.lower() not in dropped}
    if key:
        for name in given.headers:
            upstream[name] = f"Bearer {key}" if name == BEARER_HEADER else key
    if given.query is None:
        return upstream, query  # untouched: re-encoding could change what the API reads
    params = [(k, v) for k, v in urllib.parse.parse_qsl(query, True) if k != KEY_QUERY]
    if key:
        params.append((KEY_QUERY, key))
    return upstream, urllib.parse.urlencode(params)
