"""tests/test.sh → reward, by Harbor's conventions.

The tests enter the sandbox only now, after the agent phase, so the agent never saw them. The
reward is /logs/verifier/reward.txt (a number) or reward.json ({"reward": x}, or else the mean of
its numeric values); neither file means the verifier failed, which is not the agent's failure.

The agent is untrusted, and a process it leaves running is still there while the grader runs.
So the grader stands apart (`sandbox/grader.py`): its own PID and mount namespaces beside the
agent's, with /tests, its /logs/verifier, a fresh HOME and TMPDIR on a disk of its own that no
mount of the agent's holds, the agent's work state bound in, the sandbox's network joined, and a
witness that names (and refuses) any other process touching its files: such a touch is
`grader_tampered`, the agent's failure. What the agent left running is listed in the evidence.
Where a backend cannot set that up (a remote engine), the grader runs in the sandbox, as in
Harbor: a new, empty /logs/verifier, /tests checked from outside before test.sh runs, and the
trial's notes say the grader did not stand apart. Either way /tests is hashed before and after
test.sh (a change is `grader_tampered`), and the reward is read as a regular file, never through
a link, capped, and only as a finite number in [0, 1]. Anything else there (a link, a FIFO, a
directory, `true`, NaN, 12) is a verifier error that says what it found.

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

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox, _tree, grader
from levelfield.tasks import Task

VERIFIER_DIR = PurePosixPath("/logs/verifier")
TESTS_DIR = PurePosixPath("/tests")
REWARD_TXT = VERIFIER_DIR / "reward.txt"
REWARD_JSON = VERIFIER_DIR / "reward.json"
REWARD_MAX_BYTES = 64 << 10  # a number, or a small JSON object: more is not a reward
TEST = "bash /tests/test.sh"
LEFT_BY_AGENT = "left-in-logs-verifier"  # in the trial directory: what the agent left there
GRADER_LOGS = "logs-verifier"  # in the trial directory: the grader's /logs/verifier, until the
# runner puts it at logs/verifier beside the agent's logs
# What test runners write beside the tests they run (pytest's caches, Python's bytecode): an
# addition like these is the grader's own. An added conftest.py or pytest.ini is not: pytest
# would load it as part of the tests.
RUNNER_CACHES = re.compile(r"(^|/)(__pycache__|\.pytest_cache)(/|$)")
LOADED_BY_RUNNER = re.compile(r"(^|/)(conftest\.py|pytest\.ini)$")


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


@dataclass(frozen=True, slots=True)
class Verdict:
    phase: PhaseResult
    reward: float | None
    graded_nothing: str | None = None  # why the reward stands on no test (the evidence)
    grader_broken: str | None = None  # how the agent's own changes broke the grader
    tampered: tuple[str, ...] = ()  # what of the grader changed: the agent's doing
    notes: tuple[str, ...] = ()  # what the agent left in /logs/verifier; what the reward was
    left_running: tuple[str, ...] = ()  # the agent's processes, when grading began


class Reader(Protocol):
    """Where the verifier reads what a path holds: the grader's disk for the grader's own paths,
    the sandbox for the rest (a report the grader wrote into the workdir)."""

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> _tree.Entry: ...


def run_verifier(task: Task, box: Sandbox, *, trial_dir: Path) -> Verdict:
    left = box.renew_dir(VERIFIER_DIR, keep_in=trial_dir / LEFT_BY_AGENT)
    left_notes = _line(
        f"the agent left in its /logs/verifier (kept in {LEFT_BY_AGENT}/; the grader's is its "
        "own)",
        left,
    )
    started = grader.Grader.start(box, trial_dir)
    if started is None:
        return _in_sandbox(task, box, trial_dir, left_notes)
    try:
        return _apart(task, box, started, trial_dir, left_notes)
    finally:
        started.close()


def _apart(
    task: Task, box: Sandbox, judge: grader.Grader, trial_dir: Path, left_notes: list[str]
) -> Verdict:
    judge.copy_in(task.tests_dir, TESTS_DIR)
    shipped = _tree.digests(task.tests_dir)
    log = trial_dir / "verifier.log"
    offset = log.stat().st_size if log.exists() else 0
    phase = judge.run(TEST, timeout_s=task.verifier_timeout_s, log_path=log)
    changed, added = tests_changes(shipped, judge.digests(TESTS_DIR))
    reader = _Both(judge, box)
    reward, problem = read_reward(reader)
    intruded = judge.intrusions()
    tampered = [
        *_line("a process outside the grader touched the grader's files", intruded),
        *_line("/tests changed while the grader ran", changed),
    ]
    notes = [
        *left_notes,
        *_line("/tests gained while the grader ran", added),
        *([problem] if problem else []),
        *judge.notes(),
    ]
    output = _read_from(log, offset)
    nothing = graded_nothing(task, reader, output)
    broken = grader_broken(box, output) if nothing is not None else None
    if judge.setup_failure is not None:
        nothing, broken = _not_started(judge)
    skipped = judge.keep_logs(trial_dir / GRADER_LOGS)
    notes += [f"not copied from the grader's /logs/verifier: {entry}" for entry in skipped]
    return Verdict(
        phase, reward, nothing, broken, tuple(tampered), tuple(notes), judge.view.leftovers
    )


def _not_started(judge: grader.Grader) -> tuple[str, str | None]:
    """The grader's namespaces failed to form: the agent's doing when it has since put a link
    where the grader's view binds into its folders, else the harness's."""
    said = f"the grader could not start: {judge.setup_failure}"
    linked = judge.view.linked()
    if linked:
        return said, f"the agent put a link on the way of {', '.join(linked)}; {said}"
    return said, None


def _in_sandbox(task: Task, box: Sandbox, trial_dir: Path, left_notes: list[str]) -> Verdict:
    """Where the grader cannot stand apart: in the agent's sandbox, checked from outside."""
    box.copy_in(task.tests_dir, TESTS_DIR)
    shipped = _tree.digests(task.tests_dir)
    before = _not_fresh(box, shipped)
    log = trial_dir / "verifier.log"
    offset = log.stat().st_size if log.exists() else 0
    phase = box.exec(TEST, timeout_s=task.verifier_timeout_s, log_path=log)
    changed, added = tests_changes(shipped, box.digests(TESTS_DIR))
    reward, problem = read_reward(box)
    tampered = [*before, *_line("/tests changed while the grader ran", changed)]
    notes = [
        grader.IN_SANDBOX,
        *left_notes,
        *_line("/tests gained while the grader ran", added),
        *([problem] if problem else []),
    ]
    output = _read_from(log, offset)
    nothing = graded_nothing(task, box, output)
    broken = grader_broken(box, output) if nothing is not None else None
    return Verdict(phase, reward, nothing, broken, tuple(tampered), tuple(notes))


@dataclass(frozen=True, slots=True)
class _Both:
    judge: grader.Grader
    box: Sandbox

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> _tree.Entry:
        if self.judge.owns(path):
            return self.judge.read_entry(path, max_bytes=max_bytes)
        return self.box.read_entry(path, max_bytes=max_bytes)


def _line(what: str, items: list[str] | tuple[str, ...]) -> list[str]:
    return [f"{what}: {', '.join(items)}"] if items else []


def _not_fresh(box: Sandbox, shipped: dict[str, str]) -> list[str]:
    """Before test.sh: /tests holds the task's tests and nothing else, /logs/verifier nothing.
    Checked from outside the sandbox, since it is the sandbox's own tools that cleared them."""
    found: list[str] = []
    tests = box.digests(TESTS_DIR)
    if tests:  # {}: the sandbox is gone, and the verifier's exec will say so
        differ = sorted(p for p in {*shipped, *tests} if shipped.get(p) != tests.get(p))
        found += _line("/tests was not the task's tests when the grader began", differ)
    fresh = box.digests(VERIFIER_DIR)
    if fresh and fresh != {".": "directory"}:
        extra = sorted(k for k in fresh if k != ".") or [f"itself ({fresh.get('.', 'missing')})"]
        found.append(f"/logs/verifier was not empty when the grader started: {', '.join(extra)}")
    return found


def tests_changes(shipped: dict[str, str], found: dict[str, str]) -> tuple[list[str], list[str]]:
    """What the grader's tests lost or had rewritten (changed), and what they gained (added).
    A gain that a test runner writes itself is left out; one it would load is a change. Nothing
    found at all (not even a missing /tests) means the sandbox is gone: nothing can be said."""
    if not found:
        return [], []
    changed = [
        f"{path} ({'removed' if path not in found else 'rewritten'})"
        for path, what in sorted(shipped.items())
        if found.get(path) != what
    ]
    gained = sorted(p for p in found if p not in shipped and not RUNNER_CACHES.search(p))
    changed += [f"{path} (added)" for path in gained if LOADED_BY_RUNNER.search(path)]
    return changed, [path for path in gained if not LOADED_BY_RUNNER.search(path)]


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


def graded_nothing(task: Task, box: Reader, output: str) -> str | None:
    try:
        test_sh = (task.tests_dir / "test.sh").read_text(errors="replace")
    except OSError:
        return None
    failures = [line for line in output.splitlines() if BOOTSTRAP_FAILURE.search(line)]
    for report in named_reports(test_sh, task.workdir):
        found = box.read_entry(report, max_bytes=_tree.READ_MAX_BYTES)
        data = found.data if found.kind == "file" else None
        if data is None or not data.strip():
            state = "missing" if data is None else "empty"
            return f"test.sh names {report} but it is {state} after the verifier" + _quote(
                output, failures
            )
    if failures and not PYTEST_STARTED.search(output) and "pytest" in test_sh:
        return "the verifier's bootstrap failed before any test ran" + _quote(output, failures)
    return None


def grader_broken(box: Sandbox, output: str) -> str | None:
    """The agent's own changes, as the bootstrap's evidence shows them, that left a grader
    unable to grade; None when nothing there is the agent's doing (then it is infrastructure)."""
    lines = output.splitlines()
    dpkg = [line for line in lines if DPKG_BROKEN.search(line)]
    if dpkg:
        return "the agent left dpkg broken" + _quote(output, dpkg)
    changes = None
    for tool, pattern in TOOL_MISSING.items():
        failed = [line for line in lines if pattern.search(line)]
        if not failed:
            continue
        changes = changes if changes is not None else _agent_changes(box)
        touched = [f"{path} {how}" for path, how in changes if _is_tool_file(tool, path)]
        if touched:
            shown = ", ".join(touched[:EVIDENCE_LINES])
            return f"the agent broke the grader's {tool} ({shown})" + _quote(output, failed)
    return None


def _agent_changes(box: Sandbox) -> list[tuple[str, str]]:
    """Files the sandbox's engine saw changed or deleted against the image; none where the
    backend cannot say (`process`: the host's root is read-only to the agent)."""
    changes = getattr(box, "changes", None)
    found = changes() if changes is not None else None
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


def _read_from(log: Path, offset: int) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def read_reward(box: Reader) -> tuple[float | None, str | None]:
    """The reward and, when there is none, what was found instead. reward.txt decides when it
    exists in any form: a link or a FIFO in its place is not a fallback to reward.json."""
    for path, parse in ((REWARD_TXT, strict_reward_txt), (REWARD_JSON, strict_reward_json)):
        found = box.read_entry(path, max_bytes=REWARD_MAX_BYTES)
        if found.kind == "missing":
            continue
        if found.kind != "file":
            return None, f"{path} is {found.describe()}: not read as a reward"
        if found.data is None:
            return None, f"{path} is {found.describe()}, more than a reward: not read"
        text = found.data.decode(errors="replace")
        reward = parse(text)
        if reward is None:
            return None, f"{path} holds {text.strip()[:80]!r}, not a number in [0, 1]"
        return reward, None
    return None, None


def strict_reward_txt(text: str) -> float | None:
    """One finite number in [0, 1], and nothing else."""
    try:
        return _in_range(float(text.strip()))
    except ValueError:
        return None


def strict_reward_json(text: str) -> float | None:
    """A number, or an object with such a `reward` (or, without one, numeric values whose mean
    is taken): each finite and in [0, 1]. A boolean is not a number here."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict):
        values = [data["reward"]] if "reward" in data else list(data.values())
    else:
        values = [data]
    numbers = [_in_range(v) for v in values if _is_number(v)]
    if not values or len(numbers) != len(values) or None in numbers:
        return None
    return sum(numbers) / len(numbers)  # type: ignore[arg-type]


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _in_range(value: float) -> float | None:
    return float(value) if math.isfinite(value) and 0.0 <= value <= 1.0 else None


def parse_reward_txt(text: str) -> float | None:
    try:
        return float(text.strip().splitlines()[0])
    except (ValueError, IndexError):
        return None


def parse_reward_json(text: str) -> float | None:
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return reward_of(data)


def reward_of(data: object) -> float | None:
    """A number, or a mapping's `reward`, else the mean of its numbers (Harbor's reward.json)."""
    if isinstance(data, int | float) and not isinstance(data, bool):
        return float(data)
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("reward"), int | float):
        return float(data["reward"])
    values = [
        float(v) for v in data.values() if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return sum(values) / len(values) if values else None
