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

Whether the grader graded nothing, and whether the agent broke it, is decided beside the
outcome table (`outcome._grading`) from what this module reads: test.sh, its output, the
report files it names and, on oci, the engine's diff of the container.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from levelfield.outcome import graded_nothing, grader_broken, named_reports, unbacked
from levelfield.records import PhaseResult
from levelfield.sandbox import Sandbox, grader, trees
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




@dataclass(frozen=True, slots=True)
class Verdict:
    phase: PhaseResult
    reward: float | None
    graded_nothing: str | None = None  # why the reward stands on no test (the evidence)
    grader_broken: str | None = None  # how the agent's own changes broke the grader
    unbacked: str | None = None  # how the tests' own record contradicts the reward: the agent's
    tampered: tuple[str, ...] = ()  # what of the grader changed: the agent's doing
    notes: tuple[str, ...] = ()  # what the agent left in /logs/verifier; what the reward was
    left_running: tuple[str, ...] = ()  # the agent's processes, when grading began
    filled_beside: str | None = None  # the disk filled while the agent's processes ran beside


class Reader(Protocol):
    """Where the verifier reads what a path holds: the grader's disk for the grader's own paths,
    the sandbox for the rest (a report the grader wrote into the workdir)."""

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry: ...


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
    shipped = trees.digests(task.tests_dir)
    log = trial_dir / "verifier.log"
    offset = log.stat().st_size if log.exists() else 0
    # Only beside the agent's processes does a disk filling while the grader runs change a verdict.
    full_before = box.evidence().storage_full if judge.view.leftovers else None
    phase = judge.run(TEST, timeout_s=task.verifier_timeout_s, log_path=log)
    filled = _filled_beside(box, judge, full_before)
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
    graded = _graded(task, reader, box, output, reward)
    if judge.setup_failure is not None:
        graded = (*_not_started(judge), None)
    if phase.timed_out and _starved(judge, phase):
        starved = (
            f"the grader timed out after {phase.duration_s:.1f} s while the agent's processes "
            f"took {judge.agent_cpu_s:.1f} s of CPU (the grader's {judge.grader_cpu_s:.1f} s) "
            "from the ceiling they share"
        )
        graded = (graded[0], graded[1] or starved, graded[2])
    skipped = judge.keep_logs(trial_dir / GRADER_LOGS)
    notes += [f"not copied from the grader's /logs/verifier: {entry}" for entry in skipped]
    notes += [filled] if filled else []
    return Verdict(
        phase, reward, *graded, tuple(tampered), tuple(notes), judge.view.leftovers, filled
    )


def _filled_beside(box: Sandbox, judge: grader.Grader, full_before: bool | None) -> str | None:
    """The note of a trial's disk that filled while the grader ran beside the agent's
    processes (`grader.filled_beside`). `full_before`: None where the agent left nothing
    running (nothing was read)."""
    if full_before is not False or not box.evidence().storage_full:
        return None
    return grader.filled_beside(len(judge.view.leftovers))


# The grader's time limit is the harness's evidence only when the agent's processes did not hold
# the CPU meanwhile: when they took this share of the grading time, or at least as much as the
# grader's own processes (on a loaded host, both get little; the leftovers' share still shows),
# its timeout is the agent's doing.
STARVED_SHARE = 0.1


def _starved(judge: grader.Grader, phase: PhaseResult) -> bool:
    took = judge.agent_cpu_s
    if took < grader.MIN_NOTED_CPU_S:
        return False
    return took >= STARVED_SHARE * phase.duration_s or took >= judge.grader_cpu_s


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
    shipped = trees.digests(task.tests_dir)
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
    graded = _graded(task, box, box, output, reward)
    return Verdict(phase, reward, *graded, tuple(tampered), tuple(notes))


@dataclass(frozen=True, slots=True)
class _Both:
    judge: grader.Grader
    box: Sandbox

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry:
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


def _graded(
    task: Task, reader: Reader, box: Sandbox, output: str, reward: float | None
) -> tuple[str | None, str | None, str | None]:
    """Whether the grader graded nothing, whether the agent broke it, and whether the tests'
    own record contradicts the reward (`outcome`'s rules), from test.sh, the report files it
    names as found now, and the engine's diff on demand."""
    try:
        test_sh = (task.tests_dir / "test.sh").read_text(errors="replace")
    except OSError:
        return None, None, None
    reports = {
        path: _file(reader.read_entry(path, max_bytes=trees.READ_MAX_BYTES))
        for path in named_reports(test_sh, task.workdir)
    }
    contradicted = unbacked(output, reports, reward)
    nothing = graded_nothing(test_sh, output, reports)
    if nothing is None:
        return None, None, contradicted
    changes = getattr(box, "changes", None)
    broken = grader_broken(output, changes if changes is not None else lambda: None)
    return nothing, broken, contradicted


def _file(found: trees.Entry) -> bytes | None:
    return found.data if found.kind == "file" else None


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
