"""Secrets, tried as a new user would, on real process sandboxes through the real proxy:

- a `command` agent given `--api-key-env` holds the proxy's URL and a dummy token: no process
  in its sandbox has the real key in its environment, no file it can write holds it, and its
  model calls still reach the model (the scripted one) with the real key, put on by the proxy;
- a run killed with SIGKILL while its agent prints secrets (whole, split across two writes,
  inside a URL) leaves none of them in anything on disk, and resumes cleanly;
- the package-index probe reaches an index that wants credentials, and its error never holds them.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import ClassVar

import pytest

from levelfield.model_api.scripted_model import ScriptedModel, serve
from levelfield.network import probe_index
from levelfield.records import Outcome, Reason
from levelfield.store import reading

from ..conftest import MakeTask
from ._helpers import leftovers, mini_agent_task, stored_count
from .test_cli_proxy import PROBE

pytestmark = pytest.mark.sandbox
REAL_KEY = "sk-levelfield-planted-secrets-8d02f7c1"
AGENT_TOKEN = "deploy-token-planted-5e91b04a"  # a secret the user hands the agent on purpose
# Prints, for about 15 s: the token whole, split across two writes with a pause between (so that
# the pipe hands them over in two reads), inside a URL, and the key variable (the dummy token).
LEAKER = (
    'for i in $(seq 150); do echo "whole: $DEPLOY_TOKEN"; '
    'printf "split: %s" "${DEPLOY_TOKEN:0:11}"; sleep 0.05; echo "${DEPLOY_TOKEN:11}"; '
    'echo "url: https://ci:${DEPLOY_TOKEN}@git.example/repo"; '
    'echo "key: $OPENAI_API_KEY"; sleep 0.05; done'
)


def _levelfield(*args: str) -> list[str]:
    return [sys.executable, "-m", "levelfield", "run", *args]


def _files_holding(run_dir: Path, *secrets: str) -> list[str]:
    found = []
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in secrets if s.encode() in data]
    return found


def test_a_command_agent_given_a_key_holds_a_dummy_token_and_reaches_its_model_through_the_proxy(
    make_task: MakeTask, tmp_path: Path
) -> None:
    task = mini_agent_task(make_task, agent_timeout=120)
    model = ScriptedModel.for_dataset(task, require_key=REAL_KEY)
    server = serve(model)
    b64 = base64.b64encode(REAL_KEY.encode()).decode()
    model.prelude = [PROBE.format(b64=b64, port=server.port)]
    run_dir = tmp_path / "run"
    try:
        done = subprocess.run(
            _levelfield(
                str(task.parent), "--backend", "process", "--policy", "uncapped",
                "--agent", "command", "--agent-cmd", "python3 /app/mini_agent.py",
                "--agent-name", "mini", "--api-key-env", "OPENAI_API_KEY",
                "--base-url", f"http://127.0.0.1:{server.port}/v1", "--out", str(run_dir),
            ),
            env={**os.environ, "OPENAI_API_KEY": REAL_KEY},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr
    with reading(run_dir) as store:
        (record,) = list(store.records())
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), (
        record.agent_phase,
        record.evidence.notes,
    )
    assert len(record.api_calls) == model.calls == 3  # the probe, the solution, the answer
    assert all(c.outcome == "ok" and c.endpoint == "/chat/completions" for c in record.api_calls)
    assert set(model.keys_seen) == {REAL_KEY}  # the proxy put the real key on every call
    agent_logs = run_dir / "trials" / record.trial_key / "logs" / "agent"
    assert (agent_logs / "key-in-env.txt").read_text().strip() == "0"
    assert int((agent_logs / "token-in-env.txt").read_text().strip()) >= 1
    assert (agent_logs / "key-in-files.txt").read_text().strip() == ""
    assert (agent_logs / "upstream.txt").read_text().strip() == "unreachable"
    assert _files_holding(run_dir, REAL_KEY) == []


@pytest.mark.slow
def test_a_run_killed_mid_trial_leaves_no_secret_on_disk_then_resumes(
    make_task: MakeTask, tmp_path: Path
) -> None:
    task = make_task("leak", solve="true", agent_timeout=120, memory_mb=256)
    run_dir = tmp_path / "run"
    command = _levelfield(
        str(task.parent), "--backend", "process", "--policy", "uncapped",
        "--agent", "command", "--agent-cmd", LEAKER, "--agent-name", "leaker",
        "--api-key-env", "OPENAI_API_KEY", "--agent-env", f"DEPLOY_TOKEN={AGENT_TOKEN}",
        "--out", str(run_dir),
    )  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": REAL_KEY}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    harness = subprocess.Popen(command, env=env, **quiet)  # type: ignore[call-overload]
    deadline = time.monotonic() + 300  # the harness's start on a loaded host
    printed = 0
    while printed < 20 and time.monotonic() < deadline and harness.poll() is None:
        time.sleep(0.2)
        logs = list(run_dir.glob("trials/*/agent.log"))
        printed = logs[0].read_text(errors="replace").count("whole: ") if logs else 0
    assert printed >= 20, "the agent never printed"
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    assert stored_count(run_dir) == 0 and not list(run_dir.glob("trials/*/record.json"))
    time.sleep(1)  # the agent's processes, still running, lose their pipe at their next write
    (log,) = run_dir.glob("trials/*/agent.log")
    text = log.read_text(errors="replace")
    assert text.count("whole: ***") >= 20 and "url: https://ci:***@git.example/repo" in text
    assert "key: ***" in text and "levelfield-trial-" not in text  # the dummy token, masked
    assert _files_holding(run_dir, REAL_KEY, AGENT_TOKEN, AGENT_TOKEN[:11] + "\n") == []

    resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    with reading(run_dir) as store:
        (record,) = list(store.records())
        run_id = store.meta()["run_id"]
    assert record.agent_phase is not None and record.agent_phase.exit_code == 0
    assert _files_holding(run_dir, REAL_KEY, AGENT_TOKEN) == []
    assert leftovers(run_id, run_dir) == []


class _Index(BaseHTTPRequestHandler):
    """A PEP 503 index that answers only the credentials it was given."""

    expected = ""
    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:  # http.server's name for it
        self.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.end_headers()
            return
        if self.path.endswith("/pip/"):
            body = b'<a href="/files/pip-24.0-py3-none-any.whl">pip-24.0-py3-none-any.whl</a>'
        else:
            body = b"x" * 4096
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[int]:
    _Index.expected = "Basic " + base64.b64encode(b"ci:index-token-31f9").decode()
    _Index.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    Thread(target=server.serve_forever, daemon=True).start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("reachable", [True, False])
def test_the_index_probe_sends_credentials_as_pip_does_and_never_stores_them(
    index: int, reachable: bool
) -> None:
    host = f"127.0.0.1:{index}" if reachable else "no-such-host.invalid"
    probe = probe_index(f"http://ci:index-token-31f9@{host}/simple/", timeout_s=10)
    assert "index-token-31f9" not in probe.model_dump_json()
    if reachable:
        assert probe.error is None and probe.bytes == 4096, probe.error
        assert set(_Index.seen) == {_Index.expected}  # in a header, never in the URL
    else:
        assert probe.error and probe.bytes == 0
