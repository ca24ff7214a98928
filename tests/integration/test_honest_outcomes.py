"""Infrastructure failures are not booked against the agent, and secrets stay secret, for real:
an npm install that fails, an install the memory ceiling kills, a verifier that grades nothing,
an agent that prints its key, and an agent told its limits (a factor of the trial)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from levelfield.agents import AgentOptions
from levelfield.analysis.summary import summarize
from levelfield.analysis.table import load_run
from levelfield.records import Outcome, Reason
from levelfield.report.results import results_json
from levelfield.sandbox import BackendOptions
from levelfield.store import reading
from levelfield.tasks import load_task

from ..conftest import TB2_SAMPLE, MakeTask, require
from ._helpers import run_records
from .test_oci import _engine_problems, _run

pytestmark = pytest.mark.sandbox  # and oci for the Terminal-Bench 2.0 verifier below
PLANTED_KEY = "sk-ant-levelfield-planted-7c41d2e9"


def test_an_install_that_fails_is_agent_setup_failed_with_npms_words(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """The real npm registry, asked for a version that does not exist; the agent never ran."""
    task = make_task("setup", memory_mb=1024, storage_mb=1024)
    options = AgentOptions(agent_version="0.0.0-levelfield-no-such-version")
    (record,) = run_records(task, tmp_path / "run", agents=["codex"], agent_options=options)
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.AGENT_SETUP_FAILED)
    setup = record.agent_setup
    assert setup is not None and setup.phase is not None and setup.phase.exit_code != 0
    assert "ETARGET" in setup.phase.output_tail or "404" in setup.phase.output_tail
    assert any("agent setup exited" in note for note in record.evidence.notes)
    assert record.agent_phase is None and record.verifier_phase is None  # nothing else ran
    assert "agent_setup" in record.telemetry.phase_s


def test_an_install_killed_by_the_memory_ceiling_is_oom_killed(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Kernel evidence decides first: the install's OOM kill is the ceiling's doing."""
    task = make_task("oom-setup", memory_mb=64)
    options = AgentOptions(
        install="python3 -c 'b = b\"x\" * (300 << 20)'", command="touch /app/done", name="hog"
    )
    (record,) = run_records(task, tmp_path / "run", agents=["command"], agent_options=options)
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
    assert record.evidence.oom_kills >= 1
    assert record.agent_setup is not None and record.agent_setup.failed
    assert record.agent_phase is None


TB2_STYLE_TEST = """#!/bin/bash
uvx-not-reachable -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
GRADED_TEST = """#!/bin/bash
echo "as pytest --ctrf /logs/verifier/ctrf.json leaves it after a failed test"
echo '{"results": {"summary": {"failed": 1}}}' > /logs/verifier/ctrf.json
echo 0 > /logs/verifier/reward.txt
"""


def test_a_verifier_that_graded_nothing_is_verifier_error_with_the_missing_file(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Terminal-Bench's test.sh writes 0 when pytest could not even start: that is no grade."""
    task = make_task("ungraded", files={"tests/test.sh": TB2_STYLE_TEST})
    (record,) = run_records(task, tmp_path / "run", agents=["oracle"])
    assert record.reward == 0.0
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.VERIFIER_ERROR)
    (note,) = [n for n in record.evidence.notes if n.startswith("verifier graded nothing")]
    assert "/logs/verifier/ctrf.json" in note and "missing" in note
    assert "uvx-not-reachable" in note  # the log line that shows why
    graded = make_task("graded", files={"tests/test.sh": GRADED_TEST})
    (control,) = run_records(graded, tmp_path / "control", agents=["oracle"])
    assert (control.outcome, control.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)


def test_a_key_the_agent_prints_is_masked_everywhere_the_run_wrote(
    make_task: MakeTask, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent holds the proxy's dummy token, never the key, and a token the user handed it
    (--agent-env); it prints both and writes them where the run keeps files."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", PLANTED_KEY)
    handed = "ghp_handed-to-the-agent-7c1d"
    task = make_task(
        "leak",
        test='grep -q "^levelfield-trial-" /app/key.txt && test "$(cat /app/token.txt)" = '
        + handed,
    )
    options = AgentOptions(
        command='echo "using key $ANTHROPIC_API_KEY and token $GITHUB_TOKEN"; '
        'echo "$ANTHROPIC_API_KEY" > /app/key.txt; echo "$GITHUB_TOKEN" > /app/token.txt; '
        'echo "$ANTHROPIC_API_KEY $GITHUB_TOKEN" > /logs/agent/key.txt; exit 3',
        name="leaky",
        api_key_env="ANTHROPIC_API_KEY",
        agent_env={"GITHUB_TOKEN": handed},
    )
    run_dir = tmp_path / "run"
    (record,) = run_records(task, run_dir, agents=["command"], agent_options=options)
    assert record.outcome is Outcome.PASSED  # what the agent held, as the verifier saw it
    written = b"".join(p.read_bytes() for p in run_dir.rglob("*") if p.is_file())
    for secret in (PLANTED_KEY, handed, "levelfield-trial-"):  # run.db, its WAL, every log
        assert secret.encode() not in written, secret
    log = (run_dir / "trials" / record.trial_key / "agent.log").read_text()
    assert "using key *** and token ***" in log
    with sqlite3.connect(run_dir / "run.db") as conn:
        rows = " ".join(r[0] for r in conn.execute("SELECT record FROM trials"))
    assert "using key *** and token ***" in rows and PLANTED_KEY not in rows
    with reading(run_dir) as store:
        assert handed not in results_json(list(store.records()))


def test_disclosed_limits_reach_the_agent_and_are_a_paired_factor(
    make_task: MakeTask, tmp_path: Path
) -> None:
    task = make_task("budget", test=f'test "$(cat /app/ceiling)" = {64 << 20}')
    options = AgentOptions(
        command='echo "${LEVELFIELD_MEMORY_CEILING_BYTES:-}" > /app/ceiling; '
        'cp "$LEVELFIELD_INSTRUCTION_FILE" /logs/agent/seen.md',
        name="budget",
    )
    run_dir = tmp_path / "run"
    records = run_records(
        task, run_dir, agents=["command"], agent_options=options, disclose_limits="both"
    )
    by_factor = {r.limits_disclosed: r for r in records}
    assert by_factor[True].outcome is Outcome.PASSED
    assert by_factor[False].outcome is Outcome.FAILED
    seen = run_dir / "trials" / by_factor[True].trial_key / "logs" / "agent" / "seen.md"
    assert "Resource limits of this environment: 64 MiB of memory" in seen.read_text()
    data = load_run(run_dir)
    summary = summarize(data.trials, info=data.info)
    (comparison,) = [c for c in summary.comparisons if c.by == "limits_disclosed"]
    assert len(comparison.pairs) == 1


@pytest.fixture
def uv_shim_backend(tmp_path: Path) -> Iterator[object]:
    require(_engine_problems(), "an OCI engine")
    from levelfield.sandbox import oci

    oci.build_offline_bases(log=lambda line: print(f"offline-bases: {line}"))
    run_id = f"t{os.getpid()}-{tmp_path.name[-12:]}"
    backend = oci.OciBackend(BackendOptions(run_id, tmp_path), oci.OciSettings(uv_shim=True))
    yield backend
    backend.reap(run_id)


@pytest.mark.oci
def test_a_tb2_verifier_that_cannot_reach_its_index_is_verifier_error_not_failed(
    tmp_path: Path, uv_shim_backend: object
) -> None:
    """The case seen on Terminal-Bench 2.0: the oracle solved the task, but the verifier's `uvx`
    could not resolve its package index, so test.sh wrote 0 and no ctrf.json. Here the network
    is off for the whole trial; before, this was stored as failed/tests_failed."""
    root = tmp_path / "dataset" / "regex-log"
    shutil.copytree(TB2_SAMPLE / "regex-log", root)
    toml = (root / "task.toml").read_text()
    offline = toml.replace("[environment]\n", "[environment]\nallow_internet = false\n")
    (root / "task.toml").write_text(offline)
    record = _run(uv_shim_backend, load_task(root), "headroom", tmp_path / "run")
    assert record.reward == 0.0
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.VERIFIER_ERROR)
    (note,) = [n for n in record.evidence.notes if n.startswith("verifier graded nothing")]
    assert "/logs/verifier/ctrf.json" in note and "missing" in note
