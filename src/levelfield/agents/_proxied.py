"""A CLI agent's model API, reached through the recording proxy (`model_api.proxy`).

Claude Code speaks the Anthropic Messages API and Codex the OpenAI Responses API: each gets the
proxy in its base-URL variable and a per-trial dummy token in its key variables. The real key
stays in the harness. The proxy listens on the loopback of the sandbox's own network namespace,
so a mounted agent needs no network at all, and the task's network setting holds. Gemini CLI
speaks Google's API, which the proxy does not relay, and a `command` agent may speak anything:
both are run as before, with the key in their environment (masked in everything the run writes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from levelfield.agents import AgentOptions
from levelfield.errors import SandboxStartError
from levelfield.model_api.proxy import OFFICIAL_BASE_URL, ModelProxy, Provider, Route
from levelfield.sandbox import Sandbox

PROVIDERS: dict[str, tuple[Provider, ...]] = {
    "claude-code": ("anthropic",),
    "codex": ("openai",),
}
BASE_URL_ENV: dict[Provider, str] = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
}
CONVERSATION_FILE = "conversation.jsonl"


def is_proxied(kind: str) -> bool:
    return kind in PROVIDERS


@dataclass(frozen=True, slots=True)
class ProxiedApi:
    """The running proxy of one agent run, and what the sandbox is told about it."""

    proxy: ModelProxy
    port: int

    def environment(self, key_envs: tuple[str, ...]) -> dict[str, str]:
        """Base URLs to the proxy, the dummy token in every key variable the CLI reads."""
        urls = self.proxy.base_urls(self.port)
        env = {BASE_URL_ENV[provider]: url for provider, url in urls.items()}
        if len(urls) == 1:
            env["LEVELFIELD_BASE_URL"] = next(iter(urls.values()))
        for name in key_envs:
            env[name] = self.proxy.token
        return env


@contextmanager
def proxied_api(
    kind: str, options: AgentOptions, key_env: str | None, box: Sandbox, trial_dir: Path
) -> Iterator[ProxiedApi]:
    """The proxy for one run: upstream is --base-url, or the provider's own API; the key is
    the user's, read here in the harness."""
    key = options.api_key(key_env)
    routes = [
        Route(provider, options.base_url or OFFICIAL_BASE_URL[provider], key)
        for provider in PROVIDERS[kind]
    ]
    netns = box.network_namespace()
    if netns is None:
        raise SandboxStartError(
            "the model proxy needs the sandbox's network namespace on this host; a remote "
            "container engine's containers are out of its reach"
        )
    with ModelProxy(routes, conversation=trial_dir / CONVERSATION_FILE) as proxy:
        yield ProxiedApi(proxy, proxy.listen(netns))
