"""What reaches a CLI agent: its key, base URL and model in the variables the CLI reads."""

import pytest

from levelfield.agents import AgentOptions, make_agent
from levelfield.agents.command import PRESETS, api_environment
from levelfield.errors import RunConfigError

KEY = "sk-levelfield-unit-0123456789"


def test_each_preset_gets_its_key_and_base_url_in_its_own_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    options = AgentOptions(base_url="http://127.0.0.1:9/v1", model="m-1")
    claude = api_environment(PRESETS["claude-code"], "ANTHROPIC_API_KEY", options)
    assert claude["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert (claude["ANTHROPIC_API_KEY"], claude["LEVELFIELD_MODEL"]) == (KEY, "m-1")
    codex = api_environment(PRESETS["codex"], "OPENAI_API_KEY", options)
    assert codex["OPENAI_API_KEY"] == codex["CODEX_API_KEY"] == KEY
    assert codex["LEVELFIELD_BASE_URL"] == "http://127.0.0.1:9/v1"  # its -c openai_base_url
    gemini = api_environment(PRESETS["gemini-cli"], "GEMINI_API_KEY", options)
    assert gemini["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:9/v1"
    assert "ANTHROPIC_API_KEY" not in gemini


def test_agent_labels_and_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = make_agent("gemini-cli", AgentOptions(model="gemini-3"))
    assert agent.name == "gemini-cli:gemini-3"
    mounted = make_agent("codex", AgentOptions(install_mode="mounted"))
    assert mounted.is_mounted  # type: ignore[attr-defined]
    with pytest.raises(RunConfigError, match="mounted"):
        make_agent("command", AgentOptions(command="x", install="y", install_mode="mounted"))
