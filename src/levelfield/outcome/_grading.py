"""Whether a grader graded anything, and whether the agent broke it: rules read from the grader's
own output and files, decided here beside the outcome table, once for every path.

A reward can also stand on no test at all: Terminal-Bench's test.sh writes 0 whenever pytest
exits non-zero, including when `uvx` could not even download pytest. So when test.sh names a
report file (pytest's `--ctrf PATH`, `--junitxml PATH`) that is missing or empty afterwards, or
when its bootstrap visibly failed (a download or name resolution error, and pytest never started),
the verifier graded nothing: `graded_nothing` says which file and quotes the log lines.

Who is to blame for a grader that graded nothing is read from its bootstrap's evidence. A package
index it could not reach (name resolution, a refused or timed-out connection, an HTTP 5xx) is the
infrastructure's. A grader that the agent's own changes broke is the agent's (`grader_broken`):
apt saying that dpkg was interrupted or that a live process still holds its lock (the image was
built with a working dpkg and the harness never runs it), or a python3 or pip that the grader
could not run and that the sandbox's own record of changes shows the agent deleted or altered
(the engine's diff against the image; on `process` the host's root is read-only, so never).

Once the tests have started, the agent's code runs inside the grader (the tests import it, call
it), so from then on the grader's own end is no evidence of the harness's: a pass needs the
report test.sh names to exist and back it (tests counted, none failed: `unbacked`), and a grader
that ended without that report, or without any reward, ended from inside. That is the agent's
failure. Only what came before the tests started (the bootstrap) can be the infrastructure's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

from levelfield.outcome._reports import Tally, read_tally

REPORT_FLAG = re.compile(r"--(?:ctrf|junitxml|junit-xml|json-report-file)(?:=|\s+)([^\s;|&<>]+)")
BOOTSTRAP_FAILURE = re.compile(
    r"Could not resolve host|Temporary failure in name resolution|Name or service not known"
    r"|Temporary failure resolving|failed to lookup address|dns error"
    r"|Failed to fetch|Failed to download"
    r"|No matching distribution found|Could not find a version that satisfies"
    r"|Network is unreachable|Connection refused|Connection timed out"
    r"|returned error: 5\d\d|HTTP status server error|\b5\d\d\s+(?:Service Unavailable"
    r"|Bad Gateway|Internal Server Error|Gateway Time-?out)|too many 5\d\d error responses",
    re.IGNORECASE,
)
# What apt says of a dpkg the agent left broken: its state, not a network or host fault.
DPKG_BROKEN = re.compile(
    r"dpkg was interrupted, you must manually run"
    r"|Could not get lock /var/lib/dpkg/lock(?:-frontend)?\. It is held by process \d+"
)
# A python or pip the grader could not run; the agent's doing only if it changed their files.
# A script whose interpreter is gone fails as "bad interpreter" (bash < 5.1) or "cannot
# execute: required file not found" (5.1 and later): pip without its python, for instance.
TOOL_MISSING = {
    "python": re.compile(
        r"\bpython[\d.]*: (?:command )?not found|/python[\d.]*: No such file or directory"
        r"|bad interpreter: \S*python|: cannot execute: required file not found"
    ),
    "pip": re.compile(
        r"\bpip[\d.]*: (?:command )?not found|No module named '?pip\b"
        r"|/pip[\d.]*: No such file or directory"
    ),
}
CHANGE_KINDS = {0: "changed", 2: "deleted"}  # the engine's diff: 0 modified, 1 added, 2 deleted
# pytest writes its header, and flushes it, before it collects (imports) a single test module:
# nothing of the agent's has run in the grader's test runner before this line.
PYTEST_STARTED = re.compile(r"test session starts|collected \d+ item|\d+ (passed|failed)")
EVIDENCE_LINES = 6


def named_reports(test_sh: str, workdir: PurePosixPath) -> list[PurePosixPath]:
    """Report files test.sh asks pytest for; a path built from a variable cannot be checked."""
    found = []
    for line in test_sh.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for raw in REPORT_FLAG.findall(line):
            path = raw.strip("'\"")
            if "$" not in path and "`" not in path:
                found.append(workdir / path)  # an absolute path stays absolute
    return found


def graded_nothing(
    test_sh: str, output: str, reports: Mapping[PurePosixPath, bytes | None]
) -> str | None:
    """Why the reward stands on no test, if it does: before the tests started, a report file
    test.sh names (`reports`: each as read after the verifier, None when missing) missing or
    empty, or a bootstrap that visibly failed. After they started, a missing report is the
    tests' run ending early (`unbacked`), not a grade that never began."""
    if runner_started(output):
        return None
    failures = [line for line in output.splitlines() if BOOTSTRAP_FAILURE.search(line)]
    for report, data in reports.items():
        if data is None or not data.strip():
            state = "missing" if data is None else "empty"
            return f"test.sh names {report} but it is {state} after the verifier" + _quote(
                output, failures
            )
    if failures and "pytest" in test_sh:
        return "the verifier's bootstrap failed before any test ran" + _quote(output, failures)
    return None


def runner_started(output: str) -> bool:
    return PYTEST_STARTED.search(output) is not None


def unbacked(
    output: str, reports: Mapping[PurePosixPath, bytes | None], reward: float | None
) -> str | None:
    """Why the tests' own record does not back the grader's reward, when the tests started:
    a report test.sh names is missing or empty (the run ended before it reported), or a pass
    whose report does not count tests that all passed; without a named report, a run that
    ended with no reward at all. None when there is nothing to contradict."""
    if not runner_started(output):
        return None
    for report, data in reports.items():
        if data is None or not data.strip():
            state = "missing" if data is None else "empty"
            return (
                f"the tests started, and {report}, which test.sh names, is {state} after the "
                "verifier: the tests' run ended before it reported" + _quote(output)
            )
    if not reports:
        return None if reward is not None else (
            "the tests started, and the grader ended without writing a reward" + _quote(output)
        )
    if reward is None or reward < 1.0:
        return None
    for report, data in reports.items():
        tally = read_tally(data or b"")
        why = tally if isinstance(tally, str) else _short_of_a_pass(tally)
        if why is not None:
            return f"the reward is a pass, but {report} does not back it: {why}"
    return None


def _short_of_a_pass(tally: Tally) -> str | None:
    if tally.failed:
        return f"it counts {tally.failed} failed"
    if tally.tests is None:
        return "it does not count its tests"
    if tally.tests == 0:
        return "it counts no test run"
    return None


def grader_broken(
    output: str, changes: Callable[[], list[tuple[str, int]] | None]
) -> str | None:
    """The agent's own changes, as the bootstrap's evidence shows them, that left a grader
    unable to grade; None when nothing there is the agent's doing (then it is infrastructure).
    `changes`: the engine's diff of the sandbox against its image (asked only when needed;
    None where the backend cannot say, as on `process`, whose root is read-only to the agent)."""
    lines = output.splitlines()
    dpkg = [line for line in lines if DPKG_BROKEN.search(line)]
    if dpkg:
        return "the agent left dpkg broken" + _quote(output, dpkg)
    found: list[tuple[str, str]] | None = None
    for tool, pattern in TOOL_MISSING.items():
        failed = [line for line in lines if pattern.search(line)]
        if not failed:
            continue
        found = found if found is not None else _agent_changes(changes())
        touched = [f"{path} {how}" for path, how in found if _is_tool_file(tool, path)]
        if touched:
            shown = ", ".join(touched[:EVIDENCE_LINES])
            return f"the agent broke the grader's {tool} ({shown})" + _quote(output, failed)
    return None


def _agent_changes(found: list[tuple[str, int]] | None) -> list[tuple[str, str]]:
    """Files the sandbox's engine saw changed or deleted against the image."""
    return [(path, CHANGE_KINDS[kind]) for path, kind in found or () if kind in CHANGE_KINDS]


def _is_tool_file(tool: str, path: str) -> bool:
    """python: the interpreter itself (/usr/bin/python3.11); pip: its package or script."""
    name = PurePosixPath(path).name
    if tool == "python":
        return "/bin/" in path and re.fullmatch(r"python[\d.]*", name) is not None
    return re.fullmatch(r"pip[\d.]*", name) is not None


def _quote(output: str, lines: list[str] | None = None) -> str:
    """The log lines that show why: the matching ones, else the last non-empty ones."""
    picked = lines or [line for line in output.splitlines() if line.strip()]
    shown = [line.strip()[:200] for line in picked[-EVIDENCE_LINES:]]
    return (": " + " | ".join(shown)) if shown else ""
