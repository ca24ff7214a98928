"""The report a pass needs, read from reports real pytest runs write (CTRF by pytest-json-ctrf,
the plugin Terminal-Bench's test.sh installs; JUnit XML by pytest itself), and the rules that
book a grader ended from inside as the agent's failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from levelfield.outcome import graded_nothing, runner_started, unbacked
from levelfield.outcome._reports import Tally, read_tally

TESTS = {
    "passing": "def test_a():\n    assert True\n\ndef test_b():\n    assert 1 + 1 == 2\n",
    "failing": "def test_a():\n    assert True\n\ndef test_b():\n    assert 1 + 1 == 3\n",
    "erroring": "import pytest\n\n@pytest.fixture\ndef f():\n    raise RuntimeError\n\n"
    "def test_a(f):\n    pass\n\ndef test_b():\n    pass\n",
    "exit-0-on-import": "import os\nos._exit(0)\n\ndef test_a():\n    pass\n",
}
EXPECTED = {
    "passing": Tally(2, 0),
    "failing": Tally(2, 1),
    "erroring": Tally(2, 1),
    "--collect-only": Tally(0, 0),
}


def _pytest(tmp: Path, name: str, *extra: str) -> tuple[dict[str, bytes | None], str]:
    """One real pytest run over a test module: its reports (None where it wrote none) and its
    output, as the grader's log would hold them."""
    source = TESTS["passing" if name == "--collect-only" else name]
    (tmp / "test_outputs.py").write_text(source)
    ctrf, junit = tmp / "ctrf.json", tmp / "junit.xml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--ctrf", str(ctrf), f"--junitxml={junit}", *extra, str(tmp / "test_outputs.py")],
        cwd=tmp, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    found = {"ctrf": ctrf, "junit": junit}
    return {k: p.read_bytes() if p.exists() else None for k, p in found.items()}, run.stdout


@pytest.mark.parametrize("name", ["passing", "failing", "erroring", "--collect-only"])
def test_real_reports_are_tallied_as_pytest_counted(tmp_path: Path, name: str) -> None:
    extra = ("--collect-only",) if name == "--collect-only" else ()
    reports, output = _pytest(tmp_path, name, *extra)
    assert runner_started(output), output
    for kind, data in reports.items():
        if name == "--collect-only" and data is None:
            continue  # a collection alone may write no report: missing, as good as none
        assert data is not None, (kind, output)
        assert read_tally(data) == EXPECTED[name], kind


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"1", "not a report object"),
        (b"garbage", "neither JSON nor XML"),
        (b'{"reward": 1}', "no CTRF `results`"),
        (b'{"results": {"summary": {"tests": "5", "failed": 0}}}', "not counts"),
        (b"<html/>", "not a JUnit test suite"),
        (b"<testsuite tests='2' failures='x'/>", "not counts"),
    ],
)
def test_a_report_of_no_known_shape_backs_nothing(data: bytes, why: str) -> None:
    found = read_tally(data)
    assert isinstance(found, str) and why in found


CTRF = PurePosixPath("/logs/verifier/ctrf.json")


def test_a_pass_needs_its_report_to_exist_and_agree(tmp_path: Path) -> None:
    """What a module the tests import can do with `os._exit(0)`: pytest ends with 0, so
    Terminal-Bench's test.sh writes 1, and no report exists. The tests had started, so the run
    ended from inside: the agent's, with the report's absence as the evidence. A report that
    counts a failure, or no test (`addopts = --collect-only`), backs no pass either."""
    reports, output = _pytest(tmp_path, "exit-0-on-import")
    assert reports == {"ctrf": None, "junit": None}
    why = unbacked(output, {CTRF: reports["ctrf"]}, 1.0)
    assert why is not None and "is missing after the verifier" in why
    assert graded_nothing("pytest --ctrf /logs/verifier/ctrf.json", output, {CTRF: None}) is None
    failing, failed_output = _pytest(tmp_path, "failing")
    assert "counts 1 failed" in str(unbacked(failed_output, {CTRF: failing["ctrf"]}, 1.0))
    assert unbacked(failed_output, {CTRF: failing["ctrf"]}, 0.0) is None  # a fail stands
    passing, passed_output = _pytest(tmp_path, "passing")
    assert unbacked(passed_output, {CTRF: passing["ctrf"]}, 1.0) is None  # the control
    empty = b'{"results": {"summary": {"tests": 0, "failed": 0}}}'
    assert "counts no test run" in str(unbacked(passed_output, {CTRF: empty}, 1.0))


def test_only_a_run_whose_tests_never_started_graded_nothing() -> None:
    """Before pytest's header (the bootstrap: uvx, pip, curl), nothing of the agent's has run in
    the test runner: a missing report then means no grade, the verifier's. No named report and
    no reward after the tests started: the run ended from inside."""
    bootstrap = "error: Failed to fetch: `https://pypi.org/simple/pytest/`\n"
    test_sh = "uvx -w pytest-json-ctrf pytest --ctrf /logs/verifier/ctrf.json /tests"
    assert "is missing after the verifier" in str(graded_nothing(test_sh, bootstrap, {CTRF: None}))
    assert unbacked(bootstrap, {CTRF: None}, 0.0) is None
    started = "============================= test session starts ==============================\n"
    assert "without writing a reward" in str(unbacked(started, {}, None))
    assert unbacked(started, {}, 0.0) is None
    assert unbacked(bootstrap, {}, None) is None
