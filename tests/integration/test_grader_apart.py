"""The grader stands apart: its own namespaces, a clean start, and a witness no process can fool.

The hostile suite (`tests/hostile`) shows that an agent's processes cannot reach the grader. These
tests show the parts themselves on real sandboxes: what a grader sees and starts with, that the
witness names and refuses a process outside the grader even where the namespaces would not have
kept it out (a process on the host, standing in for an escape), and how a grader that fails to
start is booked.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from levelfield.policy import PRESETS, apply_policy
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.sandbox import BackendOptions, get_backend, grader
from levelfield.sandbox import _held_apart as held_apart
from levelfield.tasks import load_task

from ..conftest import MakeTask
from ._helpers import leftovers, run_with_policy

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

SEES = """
{
  echo "home=$HOME tmpdir=$TMPDIR secret=${AGENT_SECRET:-none}"
  echo "processes: $(cat /proc/[0-9]*/cmdline | tr '\\0' ' ')"
  ls -A "$HOME" | tr '\\n' ' '; echo "(home)"
  cat /app/made-by-agent
  grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '
} > /logs/verifier/seen.txt
echo 1 > /logs/verifier/reward.txt
"""


def _run(make_task: MakeTask, tmp_path: Path, *, solve: str, test: str) -> tuple[Path, TrialRecord]:
    task_dir = make_task(solve=solve, test="true", memory_mb=128)
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
    record = run_with_policy(task_dir, tmp_path / "run", PRESETS["strict"])
    return tmp_path / "run" / "trials" / record.trial_key, record


@pytest.mark.cgroup2
def test_the_grader_starts_clean_and_alone(make_task: MakeTask, tmp_path: Path) -> None:
    solve = (
        "echo work > /app/made-by-agent; mkdir -p ~/.config/pip; echo x > ~/.curlrc; "
        "export AGENT_SECRET=s3; nohup setsid sleep 300 >/dev/null 2>&1 &"
    )
    trial_dir, record = _run(make_task, tmp_path, solve=solve, test=SEES)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    seen = (trial_dir / "logs" / "verifier" / "seen.txt").read_text()
    assert f"home={grader.HOME} tmpdir={grader.TMPDIR} secret=none" in seen
    assert "processes: /usr/bin/bwrap" in seen and "sleep 300" not in seen  # none of the agent's
    assert "(home)" in seen and ".curlrc" not in seen  # a fresh HOME
    assert "work" in seen  # the agent's work state is there
    assert "CapEff: 00000000a00405fb" in seen and "NoNewPrivs: 1" in seen
    assert "Seccomp: 2" in seen  # Docker's default profile, as the agent's phases have it
    assert any("sleep 300" in line for line in record.evidence.left_running)
    assert leftovers("api-run", tmp_path / "run") == []


SPINNERS = "for i in 1 2 3 4; do nohup setsid bash -c 'while :; do :; done' >/dev/null 2>&1 & done"
CPU_BOUND = """grep -E '^[0-9]+:(cpu|cpu,cpuacct|):' /proc/self/cgroup > /logs/verifier/cgroup.txt
i=0; while [ $i -lt 300000 ]; do i=$((i + 1)); done
echo 1 > /logs/verifier/reward.txt
"""
HELD_NOTE = re.compile(
    r"(\d+) processes the agent left were held in a cgroup of the least CPU weight, within a "
    r"tenth of the trial's CPU ceiling and within what the agent had left of its memory and "
    r"pids ceilings, while the grader ran with those ceilings of its own: they took ([\d.]+) s "
    r"of CPU \(the grader ([\d.]+) s\)"
)


@pytest.mark.cgroup2
def test_busy_loops_the_agent_left_are_held_apart_from_the_grader(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Four busy loops left running would take four fifths of the trial's CPU ceiling from a
    CPU-bound test: held in a cgroup of the least weight, they get what the grader leaves, the
    kernel counts each side, and every process is back (and the child gone) after grading."""
    trial_dir, record = _run(make_task, tmp_path, solve=SPINNERS, test=CPU_BOUND)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    (held,) = [m for n in record.evidence.notes if (m := HELD_NOTE.search(n))]
    assert int(held[1]) >= 4, held[0]  # the four loops (and the sandbox's idle init)
    agent_s, grader_s = float(held[2]), float(held[3])
    assert grader_s > 3 * agent_s, held[0]  # a tenth of the ceiling against nine
    joined = (trial_dir / "logs" / "verifier" / "cgroup.txt").read_text()
    assert held_apart.HELD not in joined, joined  # the grader is not among the held
    assert leftovers("api-run", tmp_path / "run") == []


# 90 MiB held by a leftover (dd's buffer, its pipe never read), 80 MiB needed by the tests: the
# two do not fit in the 128 MiB ceiling together, each fits alone.
HOARD = "nohup setsid bash -c 'dd if=/dev/zero bs=90M count=1 | sleep 600' >/dev/null 2>&1 &"
NEEDS_MEMORY = """sleep 1
dd if=/dev/zero of=/dev/null bs=80M count=1 && echo 1 > /logs/verifier/reward.txt
"""
# Once held (its /proc/self/cgroup names the child), a leftover grows past the ceiling, then
# forks past the pids ceiling (in dash, which ends at a refused fork: bash would retry each for
# half a minute); the tests wait for it (a minute: the v2 VM forks slowly), then fork
# and allocate.
GROWS_AND_FORKS = """cat > /tmp/leftover.sh <<'EOF'
until grep -q levelfield-held /proc/self/cgroup; do sleep 0.1; done
dd if=/dev/zero of=/dev/null bs=200M count=1
sh -c 'i=0; while [ $i -lt 100 ]; do sleep 600 & i=$((i + 1)); done'
touch /app/forked
EOF
nohup setsid bash /tmp/leftover.sh >/dev/null 2>&1 &
"""
# The grader waits for the leftover's forks (a minute and more in the emulated v2 VM: released
# before, the hold would see them unrefused).
WAITS_THEN_WORKS = """for i in $(seq 4000); do [ -e /app/forked ] && break; sleep 0.1; done
for i in $(seq 30); do /bin/true || exit 1; done
dd if=/dev/zero of=/dev/null bs=80M count=1 && echo 1 > /logs/verifier/reward.txt
"""


@pytest.mark.cgroup2
def test_memory_the_agent_holds_leaves_the_grader_its_whole_ceiling(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """A leftover holding most of the memory ceiling would have the tests OOM-killed, an infra
    error the agent caused: the grader has a ceiling of its own, and the kernel kills nothing."""
    _, record = _run(make_task, tmp_path, solve=HOARD, test=NEEDS_MEMORY)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    assert record.evidence.oom_kills == record.evidence.held_oom_kills == 0
    assert record.evidence.memory_peak_bytes > 128 << 20  # both sides, each within its own
    assert any(HELD_NOTE.search(n) for n in record.evidence.notes), record.evidence.notes
    assert leftovers("api-run", tmp_path / "run") == []


@pytest.mark.cgroup2
def test_a_leftover_past_its_bounds_while_held_is_killed_and_refused_alone(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Held, a leftover grows past the memory ceiling and forks past the pids ceiling: the kernel
    kills it and refuses its forks among the held alone, the grader forks and allocates, and
    the trial's own counters stay clean (no oom_killed, no pids_exhausted)."""
    task_dir = make_task(solve=GROWS_AND_FORKS, test="true", memory_mb=128, verifier_timeout=600)
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\n" + WAITS_THEN_WORKS)
    policy = PRESETS["strict"].model_copy(update={"pids_max": 64})
    record = run_with_policy(task_dir, tmp_path / "run", policy)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    evidence = record.evidence
    assert evidence.held_oom_kills >= 1 and evidence.held_pids_max_hits >= 1, evidence
    assert evidence.oom_kills == 0 and evidence.pids_max_hits == 0, evidence
    assert any("theirs, not the grader's" in n for n in evidence.notes), evidence.notes
    assert leftovers("api-run", tmp_path / "run") == []


def test_the_graders_python_caches_its_bytecode_apart(make_task: MakeTask, tmp_path: Path) -> None:
    """The grader's Python compiles into a cache of its own (off the witnessed disk, where each
    import would wait on the witness) and reads it back at its next start."""
    test = (
        "python3 -c 'import json.decoder'\n"
        "python3 -v -c 'import json.decoder' 2> /logs/verifier/imports.txt\n"
        "echo 1 > /logs/verifier/reward.txt\n"
    )
    trial_dir, record = _run(make_task, tmp_path, solve="true", test=test)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    imports = (trial_dir / "logs" / "verifier" / "imports.txt").read_text()
    assert f"code object from '{grader.BYTECODE}/usr/lib/python3" in imports, imports[-3000:]


FILLS_THE_CACHE = (
    'dd if=/dev/zero of="$PYTHONPYCACHEPREFIX/blob" bs=1M count=400 2> /logs/verifier/dd.txt\n'
    'df -B1 --output=size "$PYTHONPYCACHEPREFIX" | tail -1 >> /logs/verifier/dd.txt\n'
    "echo 1 > /logs/verifier/reward.txt\n"
)


def test_the_graders_bytecode_cache_is_bounded(make_task: MakeTask, tmp_path: Path) -> None:
    """The tests run the agent's code, and the cache is the grader's to write: a host folder
    would take whatever that code writes there, uncapped. It is a disk of its own, and full it
    changes no verdict (Python then caches nothing)."""
    trial_dir, record = _run(make_task, tmp_path, solve="true", test=FILLS_THE_CACHE)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    said = (trial_dir / "logs" / "verifier" / "dd.txt").read_text()
    assert "No space left on device" in said, said
    assert int(said.split()[-1]) <= grader.BYTECODE_BYTES, said
    assert not (trial_dir / f"{grader.BYTECODE_DIR}.img").exists()  # gone with the grader


RAW_SOCKET = (
    "python3 -c 'import socket\ntry:\n socket.socket(socket.AF_INET, socket.SOCK_RAW, "
    'socket.IPPROTO_UDP); print("raw: opened")\nexcept PermissionError as e: '
    'print("raw: refused", e.errno)\' > /app/raw.txt'
)


def test_an_agent_cannot_open_a_raw_socket(make_task: MakeTask, tmp_path: Path) -> None:
    """A raw socket in the network namespace the grader joins would let a leftover answer the
    grader's DNS queries: the agent holds no CAP_NET_RAW, as the kernel's refusal shows."""
    test = "cp /app/raw.txt /logs/verifier/raw.txt\necho 1 > /logs/verifier/reward.txt\n"
    trial_dir, record = _run(make_task, tmp_path, solve=RAW_SOCKET, test=test)
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    assert (trial_dir / "logs" / "verifier" / "raw.txt").read_text() == "raw: refused 1\n"


MARKER = "levelfield-test-marker"  # the argv[0] of a process the agent leaves, to find it by


def _intrude_while_grading(
    tmp_path: Path, *, enter: bool, graded: threading.Event
) -> list[subprocess.CompletedProcess[str]]:
    """Once test.sh is on the grader's disk: read it, and write a reward there, by its path on
    the host. `enter`: from inside the agent's PID namespace (nsenter into that of the process
    the agent left), as a process that escaped only its mount namespace would. It watches until
    the trial is over, however long the sandbox takes to start on a busy machine."""
    while not graded.is_set():
        found = list((tmp_path / "run" / "trials").glob("*/grader/tests/test.sh"))
        if found:
            time.sleep(0.5)
            grader_dir = found[0].parents[1]
            prefix = ["nsenter", "--target", str(_pid_of(MARKER)), "--pid", "--"] if enter else []
            return [
                subprocess.run([*prefix, *argv], capture_output=True, text=True)
                for argv in (
                    ["cat", str(found[0])],
                    ["sh", "-c", f"echo 1 > {grader_dir}/verifier/reward.txt"],
                )
            ]
        time.sleep(0.02)
    raise AssertionError("the trial ended before its test.sh was seen on the grader's disk")


def _pid_of(argv0: str) -> int:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[0] == argv0.encode():
                return int(cmdline.parent.name)
        except OSError:
            continue
    raise AssertionError(f"no process named {argv0}")


@pytest.mark.parametrize("enter", [False, True], ids=["host", "agents-namespace"])
def test_the_witness_refuses_every_other_process_and_blames_only_the_agents(
    make_task: MakeTask, tmp_path: Path, enter: bool
) -> None:
    """A process outside the grader reads the tests and writes a reward while test.sh runs. Both
    opens are refused either way. From the agent's PID namespace (standing in for an agent's
    process that escaped its mount namespace) the verdict is the agent's `grader_tampered`, with
    its command line; from the host's (a backup, a search over the run directory, a VM sharing
    the host's files) it is not the agent's doing: it is noted, and the verdict stands."""
    graded = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        intruding = pool.submit(_intrude_while_grading, tmp_path, enter=enter, graded=graded)
        test = "sleep 5\necho 0 > /logs/verifier/reward.txt\n"
        try:
            _, record = _run(
                make_task, tmp_path, solve=f"(exec -a {MARKER} sleep 120) &", test=test
            )
        finally:
            graded.set()
        tried = intruding.result()  # the intruder's own failure, if any, is raised here
    assert [t.returncode for t in tried] == [1, 2], tried
    assert all("Operation not permitted" in t.stderr for t in tried), tried
    notes = " | ".join(record.evidence.notes)
    assert "(cat " in notes and "/tests/test.sh: 1 open(s) refused" in notes, notes
    assert "/logs/verifier/reward.txt: 1 open(s) refused" in notes, notes
    if enter:
        assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.GRADER_TAMPERED)
        assert "refused, not the agent's" not in notes, notes
    else:
        assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED), notes
        assert "refused, not the agent's (it does not run in the sandbox): pid" in notes, notes


def test_a_grader_that_cannot_start_is_the_harness_s_error(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """A view that cannot be built (here: a bind whose source is gone) leaves no reward and
    says why; nothing of the agent's caused it, so it is not booked against the agent."""
    task = load_task(make_task(memory_mb=128))
    backend = get_backend("process", BackendOptions("apart", tmp_path / "run"))
    trial_dir = tmp_path / "run" / "trials" / "x"
    trial_dir.mkdir(parents=True)
    box = backend.start(
        task, apply_policy(PRESETS["strict"], task.spec), trial_id="x", trial_dir=trial_dir
    )
    try:
        judge = grader.Grader.start(box, trial_dir)
        assert judge is not None
        try:
            judge.view.root += ["--bind", str(tmp_path / "gone"), "/gone"]
            phase = judge.run("echo never", timeout_s=30, log_path=trial_dir / "v.log")
            assert phase.exit_code != 0
            assert judge.setup_failure is not None and "bwrap:" in judge.setup_failure
            assert "never" not in (trial_dir / "v.log").read_text()
            assert judge.view.linked() == []  # nothing of the agent's on the way
        finally:
            judge.close()
    finally:
        box.close()
    assert not (trial_dir / "grader").exists()
