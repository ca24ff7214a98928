"""Model-driven agents through the real sandbox: a CLI agent installed with npm inside it, the
built-in terminal agent against a scripted OpenAI-compatible server, trajectories replayed under
other policies, and API keys that reach neither the agent (it holds the proxy's URL and a dummy
token) nor anything a run writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from levelfield.agents import AgentOptions
from levelfield.records import Outcome, Reason

from ..conftest import MakeTask, require
from ._helpers import run_records
from ._model_server import Script, model_server

pytestmark = pytest.mark.sandbox
PLANTED_KEY = "sk-levelfield-planted-3f9c1e77"
FAST_RETRIES = {"api_attempts": 3, "api_backoff_s": 0.05}

SOLVER_JS = """#!/usr/bin/env node
// A tiny CLI agent: reads its instruction, does what it says, tells what key and URL it holds.
const fs = require("fs");
const crypto = require("crypto");
const text = fs.readFileSync(process.env.LEVELFIELD_INSTRUCTION_FILE, "utf8");
const word = text.match(/word (\\w+)/)[1];
fs.writeFileSync("/app/answer.txt", word + "\\n");
const key = process.env.OPENAI_API_KEY || "";
fs.writeFileSync("/app/key.sha256", crypto.createHash("sha256").update(key).digest("hex"));
fs.writeFileSync("/app/base_url.txt", process.env.OPENAI_BASE_URL || "");
console.log("solver wrote", word);
"""
PACKAGE_JSON = {"name": "lf-solver", "version": "1.0.0", "bin": {"lf-solver": "solver.js"}}


def _everything_written(run_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())


def test_command_agent_installs_a_real_cli_in_the_sandbox_and_keeps_the_key_secret(
    make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(["node/npm"] if not (shutil.which("node") and shutil.which("npm")) else [], "npm")
    import hashlib

    task = make_task(
        "cli",
        test='test "$(cat /app/answer.txt)" = swordfish',
        memory_mb=512,
        files={
            "environment/solver/solver.js": SOLVER_JS,
            "environment/solver/package.json": json.dumps(PACKAGE_JSON),
        },
    )
    (task / "instruction.md").write_text("Write the word swordfish to /app/answer.txt.\n")
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    options = AgentOptions(
        install="npm install -g --offline --no-audit /app/solver",
        command="lf-solver",
        name="lf-solver",
        api_key_env="OPENAI_API_KEY",
    )
    (record,) = run_records(task, tmp_path / "run", agents=["command"], agent_options=options)
    assert record.outcome is Outcome.PASSED, record.agent_phase
    assert record.agent == "command:lf-solver"
    trajectory = json.loads(
        (tmp_path / "run" / "trials" / record.trial_key / "trajectory.json").read_text()
    )
    assert [s["step"] for s in trajectory["steps"]] == ["run"]
    assert trajectory["setup"]["mode"] == "sandbox"  # the install: its own phase, recorded apart
    assert record.agent_setup is not None and record.agent_setup.phase is not None
    assert record.agent_setup.phase.exit_code == 0 and "agent_setup" in record.telemetry.phase_s
    seen = (tmp_path / "run" / "trials").glob("*/work")  # workspaces are gone; read the log
    assert not list(seen)
    log = (tmp_path / "run" / "trials" / record.trial_key / "agent.log").read_text()
    assert "solver wrote swordfish" in log
    assert PLANTED_KEY.encode() not in _everything_written(tmp_path / "run")
    # the agent held a key, not the real one, and the proxy's URL (checked via the verifier)
    digest = hashlib.sha256(PLANTED_KEY.encode()).hexdigest()
    empty = hashlib.sha256(b"").hexdigest()
    task2 = make_task(
        "cli-key",
        test=f'k=$(cat /app/key.sha256); test "$k" != {digest} && test "$k" != {empty} && '
        "grep -qE '^http://127.0.0.1:[0-9]+/openai$' /app/base_url.txt",
        memory_mb=512,
        files={
            "environment/solver/solver.js": SOLVER_JS,
            "environment/solver/package.json": json.dumps(PACKAGE_JSON),
        },
    )
    (task2 / "instruction.md").write_text("Say the word key.\n")
    (record2,) = run_records(task2, tmp_path / "run2", agents=["command"], agent_options=options)
    assert record2.outcome is Outcome.PASSED


def test_terminal_agent_solves_a_task_through_retries_with_api_telemetry(
    make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = make_task("answer", test='test "$(cat /app/answer.txt)" = 42')
    script = (
        Script()
        .fail(429)
        .fail(500)
        .reply("Let me think.")
        .commands("echo 42 > /app/answer.txt", "cat /app/answer.txt")
        .commands(done=True)
    )
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    with model_server(script) as url:
        options = AgentOptions(model="scripted-model", base_url=url, **FAST_RETRIES)
        (record,) = run_records(task, tmp_path / "run", agents=["terminal"], agent_options=options)
    assert (record.outcome, record.agent) == (Outcome.PASSED, "terminal:scripted-model")
    outcomes = [c.outcome for c in record.api_calls]
    assert outcomes == ["rate_limited", "server_error", "ok", "ok", "ok"]
    assert [c.attempt for c in record.api_calls][:3] == [1, 2, 3]
    assert record.api_calls[-1].tokens_in == 11 and record.api_calls[-1].latency_s >= 0
    assert set(script.authorizations) == {f"Bearer {PLANTED_KEY}"}  # the key reached the API
    assert PLANTED_KEY.encode() not in _everything_written(tmp_path / "run")
    second_turn = script.requests[3]["messages"][-1]["content"]
    assert "JSON" in second_turn  # an unreadable answer is asked again, not executed
    observation = script.requests[4]["messages"][-1]["content"]
    assert "$ cat /app/answer.txt" in observation and "42" in observation


def test_an_api_failing_beyond_the_retry_policy_is_an_infra_error(
    make_task: MakeTask, tmp_path: Path
) -> None:
    task = make_task("answer")
    with model_server(Script().fail(500, times=10)) as url:
        options = AgentOptions(model="m", base_url=url, **FAST_RETRIES)
        (record,) = run_records(task, tmp_path / "run", agents=["terminal"], agent_options=options)
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.API_ERROR)
    assert [c.status for c in record.api_calls] == [500, 500, 500]
    assert "after 3 attempt(s)" in (record.error or "")


def test_a_recorded_trajectory_replays_under_other_policies(
    make_task: MakeTask, tmp_path: Path
) -> None:
    hungry = 'python3 -c \'b = b"x" * (150 << 20); open("/app/done", "w").write("ok")\''
    task = make_task("hungry", memory_mb=64)
    with model_server(Script().commands(hungry).commands(done=True)) as url:
        options = AgentOptions(model="m", base_url=url, **FAST_RETRIES)
        (recorded,) = run_records(
            task,
            tmp_path / "rec",
            agents=["terminal"],
            policies=["uncapped"],
            agent_options=options,
        )
    assert recorded.outcome is Outcome.PASSED
    trajectory = tmp_path / "rec" / "trials" / recorded.trial_key / "trajectory.json"
    assert json.loads(trajectory.read_text())["steps"][0]["command"] == hungry
    replays = run_records(
        task, tmp_path / "replay", agents=[f"replay:{trajectory}"], policies=["strict", "uncapped"]
    )
    by_policy = {r.policy: r for r in replays}
    assert (by_policy["strict"].outcome, by_policy["strict"].reason) == (
        Outcome.INFRA_ERROR,
        Reason.OOM_KILLED,
    )
    assert by_policy["uncapped"].outcome is Outcome.PASSED
