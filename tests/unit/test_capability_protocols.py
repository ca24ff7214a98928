"""What a backend or an agent offers beyond its protocol is asked for with isinstance on a named
Protocol (the executor prepares, routes, checks and mounts by them): the real classes that have a
capability are instances of its Protocol, and those without it are not, so a renamed method
cannot be skipped in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield.agents import (
    AgentOptions,
    CheckingAgent,
    MountsAgent,
    SetupAgent,
    make_agent,
)
from levelfield.sandbox import BackendOptions, PreparingBackend, RoutingBackend, get_backend

BACKENDS = {  # name: (prepares before the first trial, routes each task to another backend)
    "auto": (True, True),
    "oci": (True, False),  # pulls pinned images; the engine is not asked until it is used
    "process": (False, False),
}


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_a_backend_is_a_preparing_or_routing_backend_when_it_is_one(
    name: str, tmp_path: Path
) -> None:
    backend = get_backend(name, BackendOptions("r1", tmp_path))
    prepares, routes = BACKENDS[name]
    assert isinstance(backend, PreparingBackend) is prepares
    assert isinstance(backend, RoutingBackend) is routes


AGENTS = {  # spec: (checks the run's tasks, mounts host trees, installs in its own phase)
    "nop": (False, False, False),
    "oracle": (True, False, False),  # needs each task's solution/solve.sh
    "population": (True, False, False),  # needs each task's population file
    "replay:lean": (True, False, False),  # needs each task's trajectory
    "terminal:gpt-4.1": (False, False, False),
    "claude-code": (True, True, True),  # refuses a budget it cannot keep; mounts when mounted
}


@pytest.mark.parametrize("spec", sorted(AGENTS))
def test_an_agent_is_a_checking_mounts_or_setup_agent_when_it_is_one(spec: str) -> None:
    agent = make_agent(spec, AgentOptions())
    checks, mounts, sets_up = AGENTS[spec]
    assert isinstance(agent, CheckingAgent) is checks
    assert isinstance(agent, MountsAgent) is mounts
    assert isinstance(agent, SetupAgent) is sets_up


def test_a_cli_agent_installed_in_the_sandbox_has_nothing_to_mount() -> None:
    """It is a MountsAgent all the same: the executor asks `mounts()` before preparing a tree."""
    agent = make_agent("claude-code", AgentOptions(install_mode="sandbox"))
    assert isinstance(agent, MountsAgent)
    assert agent.mounts() == ()
