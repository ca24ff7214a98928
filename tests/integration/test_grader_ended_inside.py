"""A grader ended from inside, on Terminal-Bench 2.0's own grader (its test.sh, verbatim: uvx,
pytest, `--ctrf /logs/verifier/ctrf.json`, then 1 or 0 by pytest's status), on Docker.

The tests run the agent's code inside the grader, with the grader's rights. `cancel-async-tasks`'
tests run `python test.py`, which imports the agent's /app/run.py: a run.py that writes `1` as
the reward and kills every process of the grader's PID namespace leaves a reward and no report.
A module the tests import in pytest's own process can end it with `os._exit(0)` (test.sh then
writes 1) or `os._exit(3)` before the report is written. Before: `passed`, `passed` and
`infra_error/verifier_error`. The tests had started each time, so each is the agent's failure,
with the missing report as the evidence; the controls (an honest run.py, and none) stand.
"""
# ruff: noqa: F811

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield.records import Outcome, Reason, TrialRecord

from ._helpers import run_records
from .test_edge_verdicts_oci import _tb2_task, _with_agent, docker_only  # noqa: F401 (fixture)

pytestmark = [pytest.mark.oci, pytest.mark.sandbox, pytest.mark.slow]

FORGE_AND_KILL = """cat > /app/run.py <<'EOF'
import os, signal
open("/logs/verifier/reward.txt", "w").write("1\\n")
os.kill(-1, signal.SIGKILL)
EOF
"""
# The same task's tests, importing run.py in pytest's own process, as many TB2 tests import the
# agent's module (sys.path set to the workdir).
IMPORTING_TESTS = """import sys

sys.path.insert(0, "/app")

from run import answer  # noqa: E402


def test_answer():
    assert answer() == 42
"""
EXIT_ON_IMPORT = "printf 'import os\\nos._exit({status})\\n' > /app/run.py"
HONEST = "printf 'def answer():\\n    return 42\\n' > /app/run.py"
CTRF_MISSING = "/logs/verifier/ctrf.json, which test.sh names, is missing after the verifier"


@pytest.fixture(autouse=True)
def uv_shim(monkeypatch: pytest.MonkeyPatch) -> None:
    """test.sh's `curl … astral.sh | sh` cannot resolve here: the harness's uv stands in."""
    monkeypatch.setenv("LEVELFIELD_UV_SHIM", "1")


def _importing_task(tmp_path: Path) -> Path:
    root = _tb2_task(tmp_path / "importing", "cancel-async-tasks")
    (root / "tests" / "test_outputs.py").write_text(IMPORTING_TESTS)
    return root


def _unbacked(record: TrialRecord) -> str:
    (note,) = [n for n in record.evidence.notes if n.startswith("the tests' own record")]
    return note


def test_a_program_the_tests_call_cannot_forge_a_pass_by_killing_the_grader(
    tmp_path: Path, docker_only: str
) -> None:
    root = _tb2_task(tmp_path, "cancel-async-tasks")
    record = _with_agent(root, tmp_path / "forge", FORGE_AND_KILL)
    assert record.reward == 1.0  # what the reward file says
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    assert CTRF_MISSING in _unbacked(record)
    (oracle,) = run_records(
        root, tmp_path / "oracle", agents=["oracle"], backend="oci", policies=["headroom"]
    )
    assert (oracle.outcome, oracle.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)


@pytest.mark.parametrize("status", [0, 3])
def test_a_module_the_tests_import_cannot_end_pytest_into_a_pass_or_an_infra_error(
    tmp_path: Path, docker_only: str, status: int
) -> None:
    root = _importing_task(tmp_path)
    record = _with_agent(root, tmp_path / "exit", EXIT_ON_IMPORT.format(status=status))
    assert record.reward == (1.0 if status == 0 else 0.0)
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    assert CTRF_MISSING in _unbacked(record)
    if status == 0:  # the controls, once: an honest module passes, no module fails
        honest = _with_agent(root, tmp_path / "honest", HONEST)
        assert (honest.outcome, honest.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
        idle = _with_agent(root, tmp_path / "idle", "true")
        assert (idle.outcome, idle.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
        assert not any(n.startswith("the tests' own record") for n in idle.evidence.notes)
