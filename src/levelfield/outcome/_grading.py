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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

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
    """Why the reward stands on no test, if it does: a report file test.sh names (`reports`:
    each as read after the verifier, None when missing) missing or empty, or a bootstrap that
    visibly failed before pytest started."""
    failures = [line for line in output.splitlines() if BOOTSTRAP_FAILURE.search(line)]
    for report, data in reports.items():
        if data is None or not data.strip():
            state = "missing" if data is None else "empty"
            return f"test.sh names {report} but it is {state} after the verifier" + _quote(
                output, failures
            )
    if failures and not PYTEST_STARTED.search(output) and "pytest" in test_sh:
        return "the verifier's bootstrap failed before any test ran" + _quote(output, failures)
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
