"""The real Claude Code, Codex and Gemini CLIs solve tasks end to end, every model call through
the recording proxy, with the proxy pointed at the scripted model
(`levelfield.model_api.scripted_model`) that answers with each task's reference solution, one
shell tool call at a time, in the CLI's own protocol (Anthropic Messages, OpenAI Responses,
Gemini streamGenerateContent).

Checked for each trial: the tests pass (or, when the grader could not reach its package index,
the trial is infra_error/verifier_error: the verifier's own output says which case it is); the
proxy recorded every call the scripted model answered, with its fields; the trajectory is the
solution's commands as the proxy saw them; a planted real key reached the scripted model (the
proxy put it there) and is in neither the environment of any process in the sandbox, nor a file
the agent could write, nor anything the run wrote, while the dummy token is in the sandbox's
environment. A 401, and 429s past the CLI's retry policy, make the trial infra_error/api_error
with the calls as evidence; a 400 is the agent's own request; a stream broken off is the API's,
whatever code the CLI ends with.

Run time on a 2-core host: about 2 min on `process`, 8-10 min on `oci`.
"""

from __future__ import annotations

import base64
import json
import re
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
from levelfield.outcome._grading import PYTEST_STARTED
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.store import reading

from ..conftest import REPO, TB2_SAMPLE, missing_sandbox_prerequisites, require

pytestmark = pytest.mark.slow
PLANTED_KEY = "sk-levelfield-planted-proxy-6c2e91d4f0"
KINDS = ("claude-code", "codex", "gemini-cli")
MODEL = {"claude-code": "claude-sonnet-4-5", "codex": "gpt-5-codex", "gemini-cli": "gemini-2.5-pro"}
KEY_ENV = {kind: PRESETS[kind].key_envs[0] for kind in KINDS}
SHELL_TOOL = {"claude-code": "Bash", "codex": "exec_command", "gemini-cli": "run_shell_command"}
TB2_TASKS = ("openssl-selfsigned-cert", "regex-log")  # FROM python:3.13-slim and ubuntu:24.04
BUNDLED_TASK = "csv-totals"
# Run by the agent first, as the model's own tool call: count the key (kept out of the command
# as base64, and out of the searched paths in /run) in every process's environment and in the
# files the agent can write. No $(...) and no rm -f: Gemini CLI and Codex refuse them.
ENVIRONS = "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$f\" 2>/dev/null; done"
PROBE = (
    "printf %s {b64} | base64 -d > /run/levelfield-probe; "
    f"{ENVIRONS} | grep -cFf /run/levelfield-probe > /logs/agent/key-in-env.txt; "
    f"{ENVIRONS} | grep -c levelfield-trial- > /logs/agent/token-in-env.txt; "
    "grep -rlsFf /run/levelfield-probe /app /root /tmp /logs /home /var/tmp "
    "> /logs/agent/key-in-files.txt; : > /run/levelfield-probe; "
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
    return f"http://127.0.0.1:{port}" + ("/v1" if kind == "codex" else "")  # as each SDK wants


def _assert_solved_through_the_proxy(
    record: TrialRecord, run_dir: Path, dataset: Path, kind: str
) -> None:
    trial_dir = run_dir / "trials" / record.trial_key
    test_sh = (dataset / record.task / "tests" / "test.sh").read_text()
    must = _verdict_it_must_have(record, trial_dir, test_sh)
    assert (record.outcome, record.reason) == must, (
        record.reason,
        record.error,
        record.agent_report,
        record.evidence.notes,
    )
    calls = record.api_calls
    assert calls and all(c.outcome == "ok" and c.status == 200 for c in calls), calls
    for call in calls:
        assert _is_model_endpoint(kind, call.endpoint or ""), call
        assert call.tokens_in and call.tokens_out
        assert call.first_token_s is not None and 0 <= call.first_token_s <= call.latency_s
        assert call.started_at.endswith("+00:00")
    assert all(c.streamed for c in calls if c.endpoint and "generateContent" not in c.endpoint)
    solution = solution_commands((dataset / record.task / "solution" / "solve.sh").read_text())
    steps = json.loads((trial_dir / "trajectory.json").read_text())["steps"]
    assert [s["command"] for s in steps][1:] == solution  # after the probe
    assert all(s["tool"] == SHELL_TOOL[kind] and s["delay_s"] >= 0 for s in steps)
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


def _is_model_endpoint(kind: str, endpoint: str) -> bool:
    if kind == "gemini-cli":  # its turns stream; its model router asks generateContent
        return endpoint.endswith((":streamGenerateContent", ":generateContent"))
    return endpoint in ("/v1/messages", "/responses")


def _verdict_it_must_have(
    record: TrialRecord, trial_dir: Path, test_sh: str
) -> tuple[Outcome, Reason]:
    """Passed, unless the grader could not grade. A TB2 grader downloads its test tools (apt,
    uvx) before pytest starts: when its package index or mirror does not answer, it hangs to its
    timeout (verifier_timeout) or fails before pytest starts (verifier_error), and the trial is
    the infrastructure's, not the agent's. Which case it was is read from the verifier's own
    output and phase, not from the verdict's notes."""
    verifier = record.verifier_phase
    if verifier is not None and verifier.timed_out:
        return Outcome.INFRA_ERROR, Reason.VERIFIER_TIMEOUT
    needs_an_index = re.search(r"\buvx?\b|pip3? install|apt-get", test_sh) is not None
    output = (trial_dir / "verifier.log").read_text(errors="replace")
    if not needs_an_index or PYTEST_STARTED.search(output):
        return Outcome.PASSED, Reason.TESTS_PASSED
    return Outcome.INFRA_ERROR, Reason.VERIFIER_ERROR


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


OCI_CASES = [
    *((kind, mode) for kind in ("claude-code", "codex") for mode in ("sandbox", "mounted")),
    ("gemini-cli", "mounted"),  # its install in the sandbox is test_cli_agents.py's subject
]


@pytest.mark.oci
@pytest.mark.parametrize(("kind", "mode"), OCI_CASES)
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
@pytest.mark.parametrize("kind", ["claude-code", "codex"])
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


def _failing_run(
    tmp_path: Path, kind: str, failure: str, *, claude_retries: int
) -> tuple[TrialRecord, ScriptedModel]:
    """One trial of the bundled task on process, the scripted model failing as `failure` says.
    Claude Code's own policy is ten retries with backoff up to 32 s; fewer keep the test short."""
    dataset = _dataset(tmp_path, [REPO / "examples" / "noise-suite" / BUNDLED_TASK], 300)
    retries = {"CLAUDE_CODE_MAX_RETRIES": str(claude_retries)}
    with _scripted(dataset, failures=[Failure.parse(failure)]) as (model, port):
        (record,) = _run(
            dataset, tmp_path / "run", kind, _base_url(kind, port), policies=["uncapped"],
            agent_env=retries,
        )  # fmt: skip
    return record, model


REFUSALS = [
    *((kind, f) for kind in ("claude-code", "codex") for f in ("401@1+", "429@1+", "500@1+")),
    ("gemini-cli", "401@1+"),  # its 429s and 5xx back off 5 s and more, ten times
]


@pytest.mark.sandbox
@pytest.mark.parametrize(("kind", "failure"), REFUSALS)
def test_api_refusal_is_api_error_with_the_calls_as_evidence(
    kind: str, failure: str, tmp_path: Path, prepared: dict[str, Any], scripted_key: None
) -> None:
    require(missing_sandbox_prerequisites(), "a process sandbox")
    record, model = _failing_run(tmp_path, kind, failure, claude_retries=2)
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


@pytest.mark.sandbox
@pytest.mark.parametrize(
    ("kind", "failure", "verdict", "last_call"),
    [
        # Claude Code and Gemini CLI report a 400 as an API error: it is the agent's request
        ("claude-code", "400@1+", (Outcome.FAILED, Reason.TESTS_FAILED), "client_error"),
        ("gemini-cli", "400@1+", (Outcome.FAILED, Reason.TESTS_FAILED), "client_error"),
        # its main turn's stream reset mid-way: Gemini CLI ends with code 1, "terminated"
        ("gemini-cli", "reset@2+", (Outcome.INFRA_ERROR, Reason.API_ERROR), "connection_error"),
    ],
)
def test_a_cli_s_final_error_is_read_for_what_it_is(
    kind: str,
    failure: str,
    verdict: tuple[Outcome, Reason],
    last_call: str,
    tmp_path: Path,
    prepared: dict[str, Any],
    scripted_key: None,
) -> None:
    record, model = _failing_run(tmp_path, kind, failure, claude_retries=1)
    assert (record.outcome, record.reason) == verdict, (record.agent_report, record.evidence)
    assert record.api_calls and record.api_calls[-1].outcome == last_call, record.api_calls
    assert len(record.api_calls) == model.calls
    report = record.agent_report
    assert report is not None and report.api_failure is (verdict[1] is Reason.API_ERROR)
    _nothing_written_holds_the_key(tmp_path / "run")
