"""The real Claude Code and Codex CLIs solve tasks end to end, every model call through the
recording proxy, with the proxy pointed at the scripted model
(`levelfield.model_api.scripted_model`) that answers with each task's reference solution, one
shell tool call at a time.

Checked for each trial: the tests pass; the proxy recorded every call the scripted model
answered, with its fields; the trajectory is the solution's commands as the proxy saw them; a
planted real key reached the scripted model (the proxy put it there) and is in neither the
environment of any process in the sandbox, nor a file the agent could write, nor anything the run
wrote, while the dummy token is in the sandbox's environment. A 401, and 429s past the CLI's
retry policy, make the trial infra_error/api_error with the calls as evidence.

Run time on a 2-core host: about 1 min on `process`, 6-8 min on `oci` (both modes, both CLIs).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import levelfield
from levelfield.agents import AgentOptions
from levelfield.agents._prepare import node_tarball
from levelfield.agents.command import PRESETS, prepared_tree
from levelfield.config import RunConfig
from levelfield.model_api.scripted_model import Failure, ScriptedModel, serve, solution_commands
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.store import reading

from ..conftest import REPO, TB2_SAMPLE, missing_sandbox_prerequisites, require

pytestmark = pytest.mark.slow
PLANTED_KEY = "sk-levelfield-planted-proxy-6c2e91d4f0"
KINDS = ("claude-code", "codex")
MODEL = {"claude-code": "claude-sonnet-4-5", "codex": "gpt-5-codex"}  # classic shell tools
KEY_ENV = {"claude-code": "ANTHROPIC_API_KEY", "codex": "OPENAI_API_KEY"}
TB2_TASKS = ("openssl-selfsigned-cert", "regex-log")  # FROM python:3.13-slim and ubuntu:24.04
BUNDLED_TASK = "csv-totals"
# Run by the agent first, as the model's own tool call: count the key (kept out of the command
# as base64) in every process's environment and in the files the agent can write.
ENVIRONS = "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\" 2>/dev/null; done"
PROBE = (
    "k=$(printf %s {b64} | base64 -d); "
    f'{ENVIRONS} | grep -cF "$k" > /logs/agent/key-in-env.txt; '
    f"{ENVIRONS} | grep -c levelfield-trial- > /logs/agent/token-in-env.txt; "
    'grep -rlsF "$k" /app /root /tmp /logs /home /var/tmp > /logs/agent/key-in-files.txt; '
    "{{ timeout 5 bash -c 'echo > /dev/tcp/127.0.0.1/{port}' && echo reachable "
    "|| echo unreachable; }} > /logs/agent/upstream.txt 2>/dev/null; true"
)


@pytest.fixture(scope="module")
def prepared() -> dict[str, Any]:
    node_tarball()
    return {kind: prepared_tree(PRESETS[kind], None) for kind in KINDS}


@contextmanager
def _scripted(dataset: Path, **kwargs: Any) -> Iterator[tuple[ScriptedModel, int]]:
    """The scripted model on host loopback; its first tool call is the probe, which also tries
    to reach the model's own port directly from the sandbox (only the proxy may)."""
    model = ScriptedModel.for_dataset(dataset, require_key=PLANTED_KEY, **kwargs)
    server = serve(model, 0)
    b64 = base64.b64encode(PLANTED_KEY.encode()).decode()
    model.prelude = [PROBE.format(b64=b64, port=server.port)]
    try:
        yield model, server.port
    finally:
        server.stop()


def _dataset(tmp_path: Path, sources: list[Path], timeout_s: int | None = None) -> Path:
    root = tmp_path / "dataset"
    for source in sources:
        shutil.copytree(source, root / source.name)
        if timeout_s is not None:  # the bundled suite's 30 s is for its oracle, not a CLI's start
            toml = root / source.name / "task.toml"
            toml.write_text(
                toml.read_text().replace("timeout_sec = 30", f"timeout_sec = {timeout_s}")
            )
    return root


def _run(dataset: Path, out: Path, kind: str, base_url: str, **kwargs: Any) -> list[TrialRecord]:
    options = AgentOptions(
        model=MODEL[kind],
        base_url=base_url,
        install_mode=kwargs.pop("mode", "mounted"),
        agent_env=kwargs.pop("agent_env", {}),
    )
    config = RunConfig(dataset=dataset, out=out, agents=[kind], agent_options=options, **kwargs)
    levelfield.run(config)
    with reading(out) as store:
        return sorted(store.records(), key=lambda r: r.task)


@pytest.fixture
def scripted_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in KEY_ENV.values():
        monkeypatch.setenv(name, PLANTED_KEY)
    yield


def _base_url(kind: str, port: int) -> str:
    return f"http://127.0.0.1:{port}" + ("/v1" if kind == "codex" else "")


def _assert_solved_through_the_proxy(
    record: TrialRecord, run_dir: Path, dataset: Path, kind: str
) -> None:
    if _grader_lost_its_index(record):
        # The verifier's uvx could not resolve PyPI: the host's network failed the grader, and
        # the harness booked it as infra, as it must. Everything the proxy did is still checked.
        print(f"{record.task}: grader could not reach its package index: {record.evidence.notes}")
    else:
        assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), (
            record.reason,
            record.error,
            record.agent_report,
            record.evidence.notes,
        )
    calls = record.api_calls
    assert calls and all(c.outcome == "ok" and c.status == 200 for c in calls), calls
    for call in calls:
        assert call.endpoint in ("/v1/messages", "/responses"), call
        assert call.tokens_in and call.tokens_out and call.streamed
        assert call.first_token_s is not None and 0 <= call.first_token_s <= call.latency_s
        assert call.started_at.endswith("+00:00")
    trial_dir = run_dir / "trials" / record.trial_key
    solution = solution_commands((dataset / record.task / "solution" / "solve.sh").read_text())
    steps = json.loads((trial_dir / "trajectory.json").read_text())["steps"]
    assert [s["command"] for s in steps][1:] == solution  # after the probe
    assert all(s["tool"] in ("Bash", "exec_command") and s["delay_s"] >= 0 for s in steps)
    lines = (trial_dir / "conversation.jsonl").read_text().splitlines()
    assert len(lines) == len(calls)
    assert [json.loads(line)["call"]["started_at"] for line in lines] == [
        c.started_at for c in calls
    ]
    agent_logs = trial_dir / "logs" / "agent"
    assert (agent_logs / "key-in-env.txt").read_text().strip() == "0"
    assert int((agent_logs / "token-in-env.txt").read_text().strip()) >= 1
    assert (agent_logs / "key-in-files.txt").read_text().strip() == ""
    assert (agent_logs / "upstream.txt").read_text().strip() == "unreachable"


def _grader_lost_its_index(record: TrialRecord) -> bool:
    notes = " ".join(record.evidence.notes)
    resolution = "name resolution" in notes or "dns error" in notes
    return (record.outcome, record.reason) == (
        Outcome.INFRA_ERROR,
        Reason.VERIFIER_ERROR,
    ) and resolution


def _nothing_written_holds_the_key(run_dir: Path) -> None:
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert PLANTED_KEY.encode() not in path.read_bytes(), path


@pytest.mark.sandbox
@pytest.mark.parametrize("kind", KINDS)
def test_cli_agent_solves_a_bundled_task_on_process_without_network(
    kind: str, tmp_path: Path, prepared: dict[str, Any], scripted_key: None
) -> None:
    require(missing_sandbox_prerequisites(), "a process sandbox")
    dataset = _dataset(tmp_path, [REPO / "examples" / "noise-suite" / BUNDLED_TASK], 300)
    with _scripted(dataset) as (model, port):
        (record,) = _run(
            dataset, tmp_path / "run", kind, _base_url(kind, port), policies=["uncapped"]
        )
    _assert_solved_through_the_proxy(record, tmp_path / "run", dataset, kind)
    assert model.calls == len(record.api_calls)  # the proxy saw every call the model answered
    assert set(model.keys_seen) == {PLANTED_KEY}  # the proxy put the real key on each
    _nothing_written_holds_the_key(tmp_path / "run")


@pytest.mark.oci
@pytest.mark.parametrize("mode", ["sandbox", "mounted"])
@pytest.mark.parametrize("kind", KINDS)
def test_cli_agent_solves_tb2_tasks_on_oci(
    kind: str, mode: str, tmp_path: Path, prepared: dict[str, Any], scripted_key: None
) -> None:
    from levelfield.sandbox import oci

    from .test_oci import _engine_problems

    require(_engine_problems(), "an OCI engine")
    oci.build_offline_bases(log=lambda line: print(f"offline-bases: {line}"))
    dataset = _dataset(tmp_path, [TB2_SAMPLE / name for name in TB2_TASKS])
    with _scripted(dataset) as (model, port):
        records = _run(
            dataset,
            tmp_path / "run",
            kind,
            _base_url(kind, port),
            mode=mode,
            policies=["headroom"],
            backend="oci",
            uv_shim=True,
            concurrency=2,
        )
    assert [r.task for r in records] == sorted(TB2_TASKS)
    for record in records:
        assert record.agent_setup is not None and record.agent_setup.mode == mode
        _assert_solved_through_the_proxy(record, tmp_path / "run", dataset, kind)
    assert any(r.outcome is Outcome.PASSED for r in records), [r.reason for r in records]
    assert model.calls == sum(len(r.api_calls) for r in records)
    assert set(model.keys_seen) == {PLANTED_KEY}
    _nothing_written_holds_the_key(tmp_path / "run")


@pytest.mark.oci
@pytest.mark.parametrize("kind", KINDS)
def test_cli_agent_reaches_the_proxy_from_a_container_without_network(
    kind: str, tmp_path: Path, make_task: Any, prepared: dict[str, Any], scripted_key: None
) -> None:
    """allow_internet = false: the container has a loopback and nothing else, and the agent
    still reaches its model, through the proxy's socket in the container's namespace."""
    from .test_oci import _engine_problems

    require(_engine_problems(), "an OCI engine")
    root = make_task(
        "offline",
        solve="ls /sys/class/net > /app/interfaces.txt",
        test='test "$(cat /app/interfaces.txt)" = lo',
        memory_mb=512,
        agent_timeout=300,
    )
    toml = root / "task.toml"
    toml.write_text(
        toml.read_text().replace("[environment]\n", "[environment]\nallow_internet = false\n")
    )
    with _scripted(root.parent) as (model, port):
        (record,) = _run(
            root.parent,
            tmp_path / "run",
            kind,
            _base_url(kind, port),
            policies=["uncapped"],
            backend="oci",
        )
    _assert_solved_through_the_proxy(record, tmp_path / "run", root.parent, kind)
    assert model.calls == len(record.api_calls)


@pytest.mark.sandbox
@pytest.mark.parametrize("failure", ["401@1+", "429@1+", "500@1+"])
@pytest.mark.parametrize("kind", KINDS)
def test_api_refusal_is_api_error_with_the_calls_as_evidence(
    kind: str, failure: str, tmp_path: Path, prepared: dict[str, Any], scripted_key: None
) -> None:
    require(missing_sandbox_prerequisites(), "a process sandbox")
    dataset = _dataset(tmp_path, [REPO / "examples" / "noise-suite" / BUNDLED_TASK], 300)
    # Claude Code's own policy is ten retries with backoff up to 32 s; two keep the test short.
    retries = {"CLAUDE_CODE_MAX_RETRIES": "2"}
    with _scripted(dataset, failures=[Failure.parse(failure)]) as (model, port):
        (record,) = _run(
            dataset,
            tmp_path / "run",
            kind,
            _base_url(kind, port),
            policies=["uncapped"],
            agent_env=retries,
        )
    status = int(failure[:3])
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.API_ERROR), (
        record.reason,
        record.error,
        record.evidence.notes,
    )
    calls = record.api_calls
    assert len(calls) == model.calls >= 1
    assert all(c.status == status for c in calls), calls
    expected = {401: "client_error", 429: "rate_limited", 500: "server_error"}[status]
    assert calls[-1].outcome == expected
    if status == 429:
        assert max(c.attempt for c in calls) > 1  # the CLI retried; the proxy counted it
        assert all(c.retry_after_s == 0.0 for c in calls)
    assert any(
        "the model API stopped the agent" in n and str(status) in n for n in record.evidence.notes
    ), record.evidence.notes
    _nothing_written_holds_the_key(tmp_path / "run")
