"""The real Claude Code, Codex and Gemini CLI, from the npm registry, in Terminal-Bench 2.0 task
images that have no Node.js: installed inside the trial (`sandbox`) or prepared once on the host
and mounted (`mounted`), on `oci` and on `process`. Each runs its version command, then a real run
against a loopback endpoint that answers 401, reached through the recording proxy (the CLI's
base-URL variable points at it): the trial must come out infra_error/api_error, with the CLI's
own report as the evidence.

The npm tarballs and the prepared trees are cached on the host (/var/cache/levelfield/agents), so
a CI run downloads each CLI for the host once; `sandbox` mode downloads it inside each trial, as
it would in a real run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from levelfield.agents import AgentOptions
from levelfield.agents._prepare import node_tarball
from levelfield.agents.command import PRESETS, prepared_tree
from levelfield.plan import plan_trials
from levelfield.policy import PRESETS as POLICIES
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.runner import TrialContext, run_trial
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.store import Store
from levelfield.tasks import load_task

from ..conftest import TB2_SAMPLE, missing_sandbox_prerequisites, require
from ._model_server import unauthorized_server

pytestmark = pytest.mark.slow
PLANTED_KEY = "sk-levelfield-planted-cli-5d1f0a93"
# The CLI's own retry policy is not under test: Claude Code retries a 401 ten times (~2.5 min).
FEW_RETRIES = {"CLAUDE_CODE_MAX_RETRIES": "0"}
QUICK_TEST = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
# Terminal-Bench 2.0 tasks FROM ubuntu:24.04 and FROM python:3.13-slim-bookworm, neither with Node.
TB2_IMAGES = {"ubuntu": "regex-log", "python": "cancel-async-tasks"}


def _tb2_task(tmp_path: Path, name: str) -> Path:
    """A Terminal-Bench 2.0 task as shipped (its image, workdir, limits), with a test.sh that
    grades at once: the trial's subject here is the agent's start, not the task."""
    root = tmp_path / "dataset" / name
    shutil.copytree(TB2_SAMPLE / name, root)
    (root / "tests" / "test.sh").write_text(QUICK_TEST)
    return root


@pytest.fixture(scope="session")
def prepared() -> dict[str, Any]:
    """Each CLI prepared on the host once per CI run (and cached across runs on the machine)."""
    node_tarball()
    return {kind: prepared_tree(preset, None) for kind, preset in PRESETS.items()}


def _options(mode: str, base_url: str) -> AgentOptions:
    return AgentOptions(
        install_mode=mode,  # type: ignore[arg-type]
        base_url=base_url,
        agent_env=FEW_RETRIES,
        model=None,
    )


def _trial(
    task_root: Path, kind: str, run_dir: Path, backend: Any, options: AgentOptions
) -> TrialRecord:
    (trial,) = plan_trials([load_task(task_root)], [kind], [POLICIES["strict"]])
    ctx = TrialContext(backend.options.run_id, run_dir, backend.name, agent_options=options)
    record = run_trial(trial, backend, ctx)
    with Store.open_for_writing(run_dir) as store:  # as the executor does, to check the row too
        store.commit(record)
    return record


def _everything_written(run_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())


def _assert_started_and_api_failed(record: TrialRecord, mode: str, kind: str) -> None:
    setup = record.agent_setup
    assert setup is not None and setup.mode == mode, record
    assert setup.agent_version, setup  # the CLI's own version command answered
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.API_ERROR), (
        record.reason,
        record.agent_report,
        record.agent_phase,
        record.error,
    )
    report = record.agent_report
    assert report is not None and report.api_failure and report.exit_code is not None
    assert "401" in (report.message or "") or "nvalid" in (report.message or ""), report
    assert any("reported an API failure" in note for note in record.evidence.notes)
    if mode == "sandbox":
        assert setup.phase is not None and setup.phase.exit_code == 0
        assert "brought in" in (setup.runtime or ""), setup.runtime  # the image had no Node.js
        assert setup.memory_peak_bytes and record.evidence.memory_peak_bytes
        assert record.evidence.memory_peak_bytes >= setup.memory_peak_bytes
    else:
        assert setup.phase is None and len(setup.tree_sha256 or "") == 64
        assert Path(setup.tree_path or "").is_dir()


@pytest.fixture
def oci_backend(tmp_path: Path) -> Iterator[Any]:
    from .test_oci import _engine_problems

    require(_engine_problems(), "an OCI engine")
    from levelfield.sandbox import oci

    oci.build_offline_bases(log=lambda line: print(f"offline-bases: {line}"))
    run_id = f"t{os.getpid()}-{tmp_path.name[-12:]}"
    backend = oci.OciBackend(BackendOptions(run_id, tmp_path / "run"), oci.OciSettings())
    yield backend
    backend.reap(run_id)


@pytest.mark.oci
@pytest.mark.parametrize("kind", list(PRESETS))
def test_cli_agent_starts_in_a_tb2_image_without_node_in_both_modes_on_oci(
    kind: str, tmp_path: Path, oci_backend: Any, prepared: dict[str, Any], monkeypatch: Any
) -> None:
    monkeypatch.setenv(PRESETS[kind].key_envs[0], PLANTED_KEY)
    task = _tb2_task(tmp_path, TB2_IMAGES["ubuntu" if kind != "codex" else "python"])
    records = {}
    with unauthorized_server() as (host_url, on_host):  # reached through the proxy, from the host
        for mode in ("sandbox", "mounted"):
            run_dir = tmp_path / "run" / mode
            records[mode] = _trial(task, kind, run_dir, oci_backend, _options(mode, host_url))
            _assert_started_and_api_failed(records[mode], mode, kind)
    assert on_host.paths and on_host.credentials  # each run reached the endpoint
    assert all(PLANTED_KEY in c for c in on_host.credentials)  # the proxy put the key on each
    assert PLANTED_KEY.encode() not in _everything_written(tmp_path / "run")
    sandbox, mounted = records["sandbox"], records["mounted"]
    # Under the 1x ceiling (strict): the install is in the sandbox-mode trial's peak; a mounted
    # trial's peak is the agent's run alone, below what the install alone took.
    assert sandbox.agent_setup and sandbox.agent_setup.memory_peak_bytes
    assert mounted.agent_setup and mounted.agent_setup.memory_peak_bytes is None
    assert mounted.evidence.memory_peak_bytes is not None
    assert mounted.evidence.memory_peak_bytes < sandbox.agent_setup.memory_peak_bytes
    print(
        f"{kind} on oci: setup {sandbox.telemetry.phase_s.get('agent_setup', 0):.1f} s in the "
        f"sandbox vs {mounted.telemetry.phase_s.get('agent_setup', 0):.2f} s mounted; peak "
        f"{sandbox.evidence.memory_peak_bytes} vs {mounted.evidence.memory_peak_bytes} bytes"
    )


@pytest.mark.sandbox
@pytest.mark.parametrize("kind", list(PRESETS))
def test_cli_agent_starts_on_the_process_backend_in_both_modes(
    kind: str, tmp_path: Path, prepared: dict[str, Any], monkeypatch: Any
) -> None:
    require(missing_sandbox_prerequisites(), "a process sandbox")
    monkeypatch.setenv(PRESETS[kind].key_envs[0], PLANTED_KEY)
    task = _tb2_task(tmp_path, TB2_IMAGES["ubuntu"])
    run_id = f"t{os.getpid()}-{tmp_path.name[-12:]}"
    backend = get_backend("process", BackendOptions(run_id, tmp_path / "run"))
    try:
        with unauthorized_server() as (host_url, on_host):  # through the proxy, from the host
            for mode in ("sandbox", "mounted"):
                record = _trial(
                    task, kind, tmp_path / "run" / mode, backend, _options(mode, host_url)
                )
                assert record.agent_setup is not None
                if mode == "sandbox":  # the host's Node.js may be new enough: no tarball then
                    assert record.agent_setup.phase is not None
                    assert record.agent_setup.phase.exit_code == 0, record.agent_setup
                assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.API_ERROR)
                assert record.agent_report is not None and record.agent_report.api_failure
        assert on_host.paths and on_host.credentials
        assert all(PLANTED_KEY in c for c in on_host.credentials)
    finally:
        backend.reap(run_id)
    assert PLANTED_KEY.encode() not in _everything_written(tmp_path / "run")
