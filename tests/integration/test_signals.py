"""A trial's processes start with default signal handling, however the harness was started.

The harness here is started the way a CI script or `nohup levelfield run ... &` starts it:
SIGINT, SIGQUIT and SIGHUP ignored, SIGUSR1 blocked. The agent's shell and the grader's report
what they were given, and run a pipeline whose first command dies of SIGPIPE in a container
(`yes | head -1`, exit 141 under pipefail). One trial per backend; oci against both engines.
"""
# ruff: noqa: F811

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import MakeTask
from .test_oci import engine, stand_ins  # noqa: F401 (fixtures)

pytestmark = pytest.mark.sandbox

PROBE = (
    "grep -E '^Sig(Ign|Blk):' /proc/self/status; "
    "(set -o pipefail; yes | head -1 > /dev/null; echo \"pipe: $?\")"
)
SOLVE = f"{{ {PROBE}; }} > /app/agent-signals && touch /app/done"
TEST = (
    f"{{ {PROBE}; }} > /logs/verifier/grader-signals && "
    "cp /app/agent-signals /logs/verifier/agent-signals && test -e /app/done"
)
DEFAULTS = {"SigIgn": "0000000000000000", "SigBlk": "0000000000000000", "pipe": "141"}


def _as_a_background_job() -> None:
    """In the harness's child, before its exec: what a shell's `nohup ... &` hands on."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def _run_in_the_background(dataset: Path, out: Path, backend: str) -> dict[str, dict[str, str]]:
    done = subprocess.run(
        [sys.executable, "-m", "levelfield", "run", str(dataset), "--agent", "oracle",
         "--out", str(out), "--backend", backend],
        capture_output=True, text=True, timeout=600, preexec_fn=_as_a_background_job,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (trial,) = (out / "trials").iterdir()
    record = json.loads((trial / "record.json").read_text())
    assert record["outcome"] == "passed", (record["reason"], (trial / "verifier.log").read_text())
    found = {}
    for who in ("agent", "grader"):
        text = next(trial.rglob(f"{who}-signals")).read_text()
        found[who] = dict(line.replace("\t", " ").split(": ") for line in text.splitlines())
    return found


def test_process_trial_starts_with_default_signals(make_task: MakeTask, tmp_path: Path) -> None:
    task = make_task("signals", solve=SOLVE, test=TEST)
    found = _run_in_the_background(task.parent, tmp_path / "run", "process")
    assert found == {"agent": DEFAULTS, "grader": DEFAULTS}


def test_oci_trial_starts_with_default_signals(
    make_task: MakeTask, stand_ins: str, tmp_path: Path
) -> None:
    task = make_task("signals", solve=SOLVE, test=TEST, userland=None)
    found = _run_in_the_background(task.parent, tmp_path / "run", "oci")
    assert found == {"agent": DEFAULTS, "grader": DEFAULTS}
