"""A Ray worker refuses an attempt once its raylet is gone: read from the pid Ray hands it."""

from __future__ import annotations

import os
import subprocess

import pytest

from levelfield.executor import _ray_attempts


def test_a_live_raylet_lets_the_attempt_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_RAYLET_PID", str(os.getppid()))
    assert _ray_attempts.raylet_gone() is None


def test_a_dead_raylet_refuses_the_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process now
    monkeypatch.setenv("RAY_RAYLET_PID", str(gone.pid))
    assert _ray_attempts.raylet_gone() == f"the raylet (pid {gone.pid}) of this node is gone"


@pytest.mark.parametrize("value", [None, "", "0", "not-a-pid"])
def test_without_a_raylet_pid_the_token_alone_decides(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("RAY_RAYLET_PID", raising=False)
    else:
        monkeypatch.setenv("RAY_RAYLET_PID", value)
    assert _ray_attempts.raylet_gone() is None


def test_each_execution_has_its_own_tokens() -> None:
    first, second = (_ray_attempts.execution_prefix("run1") for _ in range(2))
    assert first != second and first.startswith("attempts/run1/")
    assert _ray_attempts.attempt_token(first, "k", 2) == first + "k/2"
