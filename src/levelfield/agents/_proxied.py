"""An agent's model API, reached through the recording proxy (`model_api.proxy`): no agent ever
holds the real key.

Claude Code speaks the Anthropic Messages API, Codex the OpenAI Responses API, Gemini CLI
Google's Gemini API; a `command` agent given a key may speak any of them, so it gets the one its
key variable names (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY...) or, when the name says
nothing, all three. Each gets the proxy in its base-URL variables and a per-trial dummy token in
its key variables (and in LEVELFIELD_API_KEY); the real key stays in the harness. The proxy
listens on the loopback of the sandbox's own network namespace, so a mounted agent needs no
network at all, and the task's network setting holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from levelfield.agents import AgentOptions
from levelfield.errors import SandboxStartError
from levelfield.model_api.budget import Meter
from levelfield.model_api.providers import BASE_URL_ENV, OFFICIAL_BASE_URL, Provider
from levelfield.model_api.proxy import ModelProxy, Route
from levelfield.sandbox import Sandbox

PRESET_PROVIDERS: dict[str, tuple[Provider, ...]] = {
    "claude-code": ("anthropic",),
    "codex": ("openai",),
    "gemini-cli": ("gemini",),
}
CONVERSATION_FILE = "conversation.jsonl"
TOKEN_ENV = "LEVELFIELD_API_KEY"  # the dummy token, whatever the agent's own key variable


@dataclass(frozen=True, slots=True)
class ProxiedApi:
    """The running proxy of one agent run, and what the sandbox is told about it."""

    proxy: ModelProxy
    port: int

    def environment(self, key_envs: tuple[str, ...]) -> dict[str, str]:
        """Base URLs to the proxy, the dummy token in every key variable the agent reads."""
        urls = self.proxy.base_urls(self.port)
        env = {BASE_URL_ENV[provider]: url for provider, url in urls.items()}
        if len(urls) == 1:
            env["LEVELFIELD_BASE_URL"] = next(iter(urls.values()))
        for name in (*key_envs, TOKEN_ENV):
            env[name] = self.proxy.token
        return env


@contextmanager
def proxied_api(
    providers: tuple[Provider, ...],
    options: AgentOptions,
    key_env: str | None,
    box: Sandbox,
    trial_dir: Path,
    *,
    allow_internet: bool = False,
) -> Iterator[ProxiedApi]:
    """The proxy for one run: upstream is --base-url, or each provider's own API; the key is
    the user's, read here in the harness. The token and the key join the sandbox's secrets. The
    proxy keeps the trial's model budget (`options.budget`)."""
    key = options.api_key(key_env)
    routes = [
        Route(provider, options.base_url or OFFICIAL_BASE_URL[provider], key)
        for provider in providers
    ]
    netns = box.network_namespace()
    if netns is None:
        raise SandboxStartError(
            "the model proxy needs the sandbox's network namespace on this host; a remote "
            "container engine's containers are out of its reach"
        )
    conversation = trial_dir / CONVERSATION_FILE
    meter = Meter(options.budget, options.prices, options.model)
    with ModelProxy(
        routes,
        conversation=conversation,
        secrets=box.secrets,
        meter=meter,
        allow_internet=allow_internet,
    ) as proxy:
        yield ProxiedApi(proxy, proxy.listen(netns))
