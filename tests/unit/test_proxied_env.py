"""What a proxied agent's sandbox is told: the proxy's URL and a dummy token, never the key; and
which agents still need network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from levelfield.agents import AgentOptions, make_agent
from levelfield.agents._proxied import ProxiedApi
from levelfield.model_api.proxy import ModelProxy, Route
from levelfield.tasks import load_task

KEY = "sk-levelfield-unit-proxied-0123456789"


@pytest.mark.parametrize(
    ("kind", "provider", "key_vars", "url_var"),
    [
        ("claude-code", "anthropic", ("ANTHROPIC_API_KEY",), "ANTHROPIC_BASE_URL"),
        ("codex", "openai", ("OPENAI_API_KEY", "CODEX_API_KEY"), "OPENAI_BASE_URL"),
        ("gemini-cli", "gemini", ("GEMINI_API_KEY",), "GOOGLE_GEMINI_BASE_URL"),
        ("command", "openai", ("OPENAI_API_KEY",), "OPENAI_BASE_URL"),
    ],
)
def test_the_sandbox_gets_the_proxy_and_a_dummy_token_never_the_key(
    kind: str,
    provider: Any,
    key_vars: tuple[str, ...],
    url_var: str,
    make_task: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(key_vars[0], KEY)
    options = AgentOptions(
        model="m-1", base_url="http://127.0.0.1:9", command="x", api_key_env=key_vars[0]
    )
    agent: Any = make_agent(kind, options)
    task = load_task(make_task())
    proxy = ModelProxy([Route(provider, "http://127.0.0.1:9", SecretStr(KEY))])
    api = ProxiedApi(proxy, 4321)
    run_env = agent.environment(task, api.environment(agent.key_envs()))
    setup_env = agent.environment(task)
    assert all(KEY not in value for value in [*run_env.values(), *setup_env.values()])
    assert all(run_env[name] == proxy.token for name in (*key_vars, "LEVELFIELD_API_KEY"))
    assert (
        run_env[url_var] == run_env["LEVELFIELD_BASE_URL"] == (f"http://127.0.0.1:4321/{provider}")
    )
    assert run_env["LEVELFIELD_MODEL"] == "m-1"
    assert proxy.token not in setup_env.values()  # the install never talks to the model
    assert proxy.token.startswith("levelfield-trial-") and proxy.token != ModelProxy([]).token


def test_only_a_mounted_proxied_agent_can_do_without_network(tmp_path: Path) -> None:
    def needs(kind: str, mode: str) -> bool:
        options = AgentOptions(install_mode=mode)  # type: ignore[arg-type]
        return bool(make_agent(kind, options).needs_network)

    assert not any(needs(kind, "mounted") for kind in ("claude-code", "codex", "gemini-cli"))
    assert all(needs(kind, "sandbox") for kind in ("claude-code", "codex", "gemini-cli"))


def test_a_command_agent_gets_network_only_for_an_install_or_when_asked() -> None:
    def needs(**options: Any) -> bool:
        return bool(make_agent("command", AgentOptions(command="x", **options)).needs_network)

    assert not needs()  # its model, if any, is on the sandbox's own loopback
    assert not needs(api_key_env="OPENAI_API_KEY")
    assert needs(install="pip install my-agent")
    assert needs(network=True)


def test_scripted_model_command_refuses_a_bad_failure_plan_with_exit_2(make_task: Any) -> None:
    from typer.testing import CliRunner

    from levelfield.cli.app import app

    runner = CliRunner()
    dataset = make_task().parent
    bad = runner.invoke(app, ["scripted-model", str(dataset), "--port", "0", "--fail", "429 on 3"])
    assert bad.exit_code == 2 and "STATUS@CALL" in bad.output
    empty = runner.invoke(app, ["scripted-model", str(dataset / "nothing-here"), "--port", "0"])
    assert empty.exit_code == 2
