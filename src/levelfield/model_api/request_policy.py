"""What an allowed model call asks the provider to do, judged before it goes out.

A model call on an allowed path can still reach the network or outlive its trial through the
provider: a server-side tool fetches any URL with the real key (web fetch and search, MCP
connectors, remote code execution, computer use, file search over uploads), `store` and
`previous_response_id` leave an answer with the provider that a later trial reads back, and `n`
bills many completions to one call. This module reads the call's JSON body and says which:
server-side tools only when the task allows internet, storage always off (`store: false` forced,
response and conversation ids only from answers this trial's proxy relayed), fan-out capped.

`RELAYED` states per provider what is relayed and what is not; the disclosure card shows it, as
part of the configuration a score is reported under.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Final

from levelfield.model_api.allowlist import Admitted, Refusal

__all__ = ["MAX_CHOICES", "RELAYED", "IssuedIds", "inspect_call"]

MAX_CHOICES: Final = 1  # completions per call: a CLI agent asks for one
# Tool types (prefixes: versions are dated, web_search_20250305) the provider runs on its side
# with network access. Anthropic: docs.anthropic.com "Tools" (server tools); OpenAI: the
# Responses API's built-in tools; Gemini: the `tools` field of generateContent.
ANTHROPIC_NETWORK_TOOLS: Final = (
    "web_fetch",
    "web_search",
    "code_execution",
    "computer",
    "bash_code",
)
OPENAI_NETWORK_TOOLS: Final = (
    "web_search",
    "mcp",
    "file_search",
    "code_interpreter",
    "computer_use",
    "computer",
    "image_generation",
)
GEMINI_NETWORK_TOOLS: Final = (
    "google_search",
    "googleSearch",
    "google_search_retrieval",
    "googleSearchRetrieval",
    "url_context",
    "urlContext",
    "code_execution",
    "codeExecution",
)
# Body fields that attach remote servers or containers outside `tools`.
ANTHROPIC_NETWORK_FIELDS: Final = ("mcp_servers", "container")
OPENAI_STATE_FIELDS: Final = ("previous_response_id", "conversation")

RELAYED: Final = {
    "anthropic": "function tools only; server tools (web_fetch, web_search, code_execution, "
    "computer), mcp_servers and container/skills only when the task allows internet",
    "openai": "function and custom tools only; web_search, mcp, file_search, code_interpreter, "
    "computer_use and image_generation only when the task allows internet; store forced false; "
    "previous_response_id and conversation only from this trial; n capped at "
    f"{MAX_CHOICES}",
    "gemini": "functionDeclarations only; google_search, google_search_retrieval, url_context "
    f"and code_execution only when the task allows internet; candidateCount capped at "
    f"{MAX_CHOICES}",
}


class IssuedIds:
    """Response and conversation ids from answers this trial's proxy relayed: the only ones a
    later call of the same trial may continue from."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def note_answer(self, data: bytes) -> None:
        """Take the ids of one answer (a JSON body, or a stream's events)."""
        for text in _json_texts(data):
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            for obj in (doc, doc.get("response") if isinstance(doc, dict) else None):
                if isinstance(obj, dict) and isinstance(obj.get("id"), str):
                    with self._lock:
                        self._ids.add(obj["id"])
                if isinstance(obj, dict) and isinstance(obj.get("conversation"), dict):
                    conv = obj["conversation"].get("id")
                    if isinstance(conv, str):
                        with self._lock:
                            self._ids.add(conv)

    def __contains__(self, id_: object) -> bool:
        with self._lock:
            return id_ in self._ids


@dataclass(frozen=True, slots=True)
class Inspected:
    """The verdict on one call: a refusal, or the body to relay (changed when `store` was)."""

    refusal: Refusal | None
    body: bytes


def inspect_call(
    admitted: Admitted, body: bytes, doc: Any, *, allow_internet: bool, issued: IssuedIds
) -> Inspected:
    if not isinstance(doc, dict):
        return Inspected(None, body)
    name = admitted.endpoint.name
    refusal: Refusal | None = None
    if not allow_internet:
        refusal = _network_refusal(admitted.provider, doc)
    if refusal is None and admitted.provider == "openai":
        refusal = _state_refusal(doc, issued)
    if refusal is None:
        refusal = _choices_refusal(admitted.provider, doc)
    if refusal is not None:
        return Inspected(refusal, body)
    if name in ("POST /responses", "POST /chat/completions") and doc.get("store") is not False:
        return Inspected(None, json.dumps({**doc, "store": False}).encode())
    return Inspected(None, body)


def _network_refusal(provider: str, doc: dict[str, Any]) -> Refusal | None:
    tools = doc.get("tools")
    tools = tools if isinstance(tools, list) else []
    if provider == "anthropic":
        for field in ANTHROPIC_NETWORK_FIELDS:
            if doc.get(field):
                return _no_internet(f"`{field}`")
        for tool in tools:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if isinstance(kind, str) and kind.startswith(ANTHROPIC_NETWORK_TOOLS):
                return _no_internet(f"the server tool {kind}")
    if provider == "openai":
        for tool in tools:
            kind = tool.get("type") if isinstance(tool, dict) else None
            if isinstance(kind, str) and kind.startswith(OPENAI_NETWORK_TOOLS):
                return _no_internet(f"the built-in tool {kind}")
        if doc.get("web_search_options") is not None:
            return _no_internet("web_search_options")
    if provider == "gemini":
        for tool in tools:
            named = [k for k in tool if k in GEMINI_NETWORK_TOOLS] if isinstance(tool, dict) else []
            if named:
                return _no_internet(f"the tool {named[0]}")
    return None


def _no_internet(what: str) -> Refusal:
    return Refusal(
        f"{what} reaches the network on the provider's side; the task has no internet", 400
    )


def _state_refusal(doc: dict[str, Any], issued: IssuedIds) -> Refusal | None:
    for field in OPENAI_STATE_FIELDS:
        value = doc.get(field)
        if isinstance(value, dict):
            value = value.get("id")
        if value is not None and value not in issued:
            return Refusal(f"`{field}` {value!r} was not issued in this trial", 400)
    return None


def _choices_refusal(provider: str, doc: dict[str, Any]) -> Refusal | None:
    if provider == "openai":
        asked = doc.get("n")
    elif provider == "gemini":
        config = doc.get("generationConfig") or doc.get("generation_config")
        asked = config.get("candidateCount") if isinstance(config, dict) else None
    else:
        return None
    if asked is not None and (not isinstance(asked, int) or asked > MAX_CHOICES):
        return Refusal(f"{asked!r} completions in one call; at most {MAX_CHOICES}", 400)
    return None


def _json_texts(data: bytes) -> list[str]:
    text = data.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):
        return [text]
    return [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
