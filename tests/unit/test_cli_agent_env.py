"""What reaches a CLI agent: never the key. Every agent given one is proxied, for the providers
its key variable names; a `command` agent given none keeps its endpoint as given."""

from typing import Any

import pytest

from levelfield.agents import AgentOptions, make_agent
from levelfield.errors import RunConfigError
from levelfield.tasks import load_task

KEY = "sk-levelfield-unit-0123456789"


@pytest.mark.parametrize(
    ("kind", "key_env", "providers"),
    [
        ("claude-code", None, ("anthropic",)),
        ("codex", None, ("openai",)),
        ("gemini-cli", None, ("gemini",)),
        ("command", "ANTHROPIC_API_KEY", ("anthropic",)),
        ("command", "GEMINI_API_KEY", ("gemini",)),
        ("command", "MY_LLM_KEY", ("anthropic", "openai", "gemini")),  # the name says nothing
    ],
)
def test_every_agent_given_a_key_is_proxied_for_the_providers_its_key_names(
    kind: str, key_env: str | None, providers: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "MY_LLM_KEY"):
        monkeypatch.setenv(name, KEY)
    options = AgentOptions(command="x", api_key_env=key_env, model="m-1")
    agent: Any = make_agent(kind, options)
    assert agent.providers() == providers


def test_a_command_agent_without_a_key_keeps_its_endpoint_and_holds_no_key(
    make_task: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # in the harness, not given to this agent
    options = AgentOptions(command="x", base_url="http://127.0.0.1:9/v1", model="m-1")
    agent: Any = make_agent("command", options)
    assert agent.providers() == ()
    env = agent.environment(load_task(make_task()))
    assert env["LEVELFIELD_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert env["LEVELFIELD_MODEL"] == "m-1"
    assert all(KEY not in value for value in env.values())


def test_agent_labels_and_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent("gemini-cli", AgentOptions(model="gemini-3"))
    assert agent.name == "gemini-cli:gemini-3"
    mounted = make_agent("codex", AgentOptions(install_mode="mounted"))
    assert mounted.is_mounted  # type: ignore[attr-defined]
    with pytest.raises(RunConfigError, match="mounted"):
        make_agent("command", AgentOptions(command="x", install="y", install_mode="mounted"))
