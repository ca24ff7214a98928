"""Adding an agent or a backend is one new file plus one registry line: a toy of each, registered
here, runs a trial end to end through `levelfield.run`."""

from __future__ import annotations

from pathlib import Path

import pytest

import levelfield
from levelfield import agents, sandbox
from levelfield.records import Outcome, Reason
from levelfield.store import reading

from ..conftest import MakeTask


@pytest.mark.sandbox
def test_a_toy_agent_on_a_toy_backend_runs_a_trial(
    make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(agents._AGENTS, "echo", "tests.toys.echo_agent")  # type: ignore[index]
    monkeypatch.setitem(sandbox._BACKENDS, "chroot", "tests.toys.chroot_backend")  # type: ignore[index]
    task = make_task("answer", test='[ "$(cat /app/answer.txt)" = forty-two ]')
    config = levelfield.RunConfig(
        dataset=task.parent,
        out=tmp_path / "run",
        agents=["echo:forty-two", "echo:seven"],
        backend="chroot",
        policies=["strict"],
        index_probe_every_s=0,
    )
    levelfield.run(config)
    with reading(tmp_path / "run") as store:
        records = {r.agent: r for r in store.records()}
    assert {a: (r.outcome, r.reason) for a, r in records.items()} == {
        "echo:forty-two": (Outcome.PASSED, Reason.TESTS_PASSED),
        "echo:seven": (Outcome.FAILED, Reason.TESTS_FAILED),
    }
    assert all(r.backend == "chroot" for r in records.values())


def test_an_unknown_agent_names_every_registered_one() -> None:
    with pytest.raises(levelfield.LevelfieldError) as info:
        agents.make_agent("nobody")
    assert all(kind in str(info.value) for kind in agents.agent_kinds())
