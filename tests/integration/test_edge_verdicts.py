"""Verdicts at the edges, for real: an agent timeout followed by a verifier that could not grade,
a SIGKILL from outside the trial, a kill by an OOM above the trial's own ceiling, a full disk that
the evidence shows (and a "No space left on device" that it does not), on the process sandbox."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from levelfield.plan import plan_trials
from levelfield.policy import PRESETS
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.runner import TrialContext, run_trial
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.sandbox.cgroups import detect, kill_cgroup_processes, remove_tree
from levelfield.store import reading
from levelfield.tasks import load_task

from ..conftest import MakeTask
from ._chaos import trial_cgroups, wait_for
from ._helpers import leftovers, run_records

pytestmark = pytest.mark.sandbox


def _run_one(task: Path, out: Path) -> TrialRecord:
    (record,) = run_records(task, out, policies=["strict"], backend="process")
    return record


# Terminal-Bench's shape: pytest never starts, no report, and test.sh writes 0 all the same.
UNGRADED = """uvx-missing pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi"""


def test_an_agent_timeout_then_a_verifier_that_could_not_grade_is_an_infra_error(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Before: failed/agent_timeout, although the verifier, which runs anyway and can pass a
    timed-out agent, never graded. Each way of not grading gives the verifier's reason."""
    slow = "touch /app/done; sleep 30"  # the work is done; the agent just never returns
    cases = {
        "timed out": ("sleep 30", Reason.VERIFIER_TIMEOUT),
        "wrote no reward": ("exit 0", Reason.VERIFIER_ERROR),
        "graded nothing": (UNGRADED, Reason.VERIFIER_ERROR),
    }
    for what, (test_body, reason) in cases.items():
        name = what.replace(" ", "-")
        test = f"#!/bin/bash\n{test_body}\n"
        task = make_task(name, solve=slow, agent_timeout=1, verifier_timeout=1,
                         files={"tests/test.sh": test})  # fmt: skip
        record = _run_one(task, tmp_path / name)
        assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, reason), what
        assert record.agent_phase is not None and record.agent_phase.timed_out
        (note,) = [n for n in record.evidence.notes if n.startswith("the agent timed out after")]
        assert f"then the verifier {what}" in note and "result is unknown" in note
    graded = make_task("graded", solve=slow, agent_timeout=1)
    control = _run_one(graded, tmp_path / "graded")  # it graded: the timeout stands
    assert (control.outcome, control.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    failing = make_task("failing", solve="sleep 30", agent_timeout=1)
    control = _run_one(failing, tmp_path / "failing")
    assert (control.outcome, control.reason) == (Outcome.FAILED, Reason.AGENT_TIMEOUT)


def _run_in_thread(task_root: Path, out: Path) -> tuple[threading.Thread, dict[str, object]]:
    (trial,) = plan_trials([load_task(task_root)], ["oracle"], [PRESETS["headroom"]])
    run_id = "edge-" + out.name
    backend = get_backend("process", BackendOptions(run_id, out))
    result: dict[str, object] = {"run_id": run_id}

    def target() -> None:
        try:
            result["record"] = run_trial(trial, backend, TrialContext(run_id, out, "process"))
        finally:
            backend.reap(run_id)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, result


def _agent_shell(run_id: str) -> int | None:
    """The agent phase's own shell in the trial: `bash -c "bash /solution/solve.sh"`, which bash
    turns into `bash /solution/solve.sh` by exec (a single command needs no fork)."""
    for pids in trial_cgroups(run_id).values():
        for pid in pids:
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if argv[:2] == [b"bash", b"/solution/solve.sh"]:
                    return pid
    return None


def test_a_sigkill_from_outside_with_no_oom_kill_is_said_to_be_unexplained(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """A real SIGKILL of the agent's shell from outside the sandbox. No OOM killer acted, so the
    verdict stays the reward's (the agent could have sent it itself), and the evidence says what
    was ruled out: the trial's cgroup, the host's oom_kill counter, the kernel log."""
    task = make_task("victim", solve="sleep 20; touch /app/done", agent_timeout=60)
    thread, result = _run_in_thread(task, tmp_path / "victim")
    run_id = str(result["run_id"])
    wait_for(lambda: _agent_shell(run_id) is not None, "the agent's shell", timeout_s=60)
    os.kill(_agent_shell(run_id) or 0, 9)
    thread.join(timeout=120)
    record = result["record"]
    assert isinstance(record, TrialRecord)
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    assert record.agent_phase is not None and record.agent_phase.signal == 9
    assert record.evidence.oom_kills == 0 and record.evidence.outside_oom_kills == 0
    (note,) = [n for n in record.evidence.notes if "ended by SIGKILL" in n]
    assert "the agent phase ended by SIGKILL" in note and "unexplained" in note
    if record.evidence.host_oom_kills == 0:  # another user's OOM kill may land meanwhile
        assert "oom_kill unchanged" in note


PARENT_LIMIT_MB = 320


@pytest.fixture
def small_parent(tmp_path: Path) -> object:
    """A memory cgroup with a small limit, beside the test's own, for a harness to run in: an
    OOM there is above every trial's own ceiling, as the host running out is, with no risk to
    this machine. cgroup v1 (this host); use_hierarchy makes the limit cover the trials below."""
    host = detect()
    if host.version != 1:
        pytest.skip("the parent-limit harness is built for cgroup v1 (this CI host)")
    parent = host.bases["memory"] / f"levelfield-test-parent-{os.getpid()}-{tmp_path.name[-8:]}"
    parent.mkdir()
    assert (parent / "memory.use_hierarchy").read_text().strip() == "1"
    (parent / "memory.limit_in_bytes").write_text(str(PARENT_LIMIT_MB << 20))
    yield parent
    kill_cgroup_processes(parent)
    remove_tree(parent)


def test_a_kill_by_an_oom_above_the_trials_own_ceiling_is_host_pressure(
    make_task: MakeTask, tmp_path: Path, small_parent: Path
) -> None:
    """The harness runs in a cgroup limited to 320 MiB; an uncapped trial allocates 1 GiB. The
    kernel kills it at the parent's limit, not at a ceiling of the trial's, and the trial's own
    cgroup still counts the kill (measured): only the kernel log tells the two apart. Before:
    infra_error/oom_killed, as if the trial's own ceiling had been hit."""
    hog = "python3 -c 'b = b\"x\" * (1024 << 20)' && touch /app/done"
    task = make_task("hog", solve=hog, memory_mb=64, agent_timeout=120)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "levelfield", "run", str(task.parent), "--policy",
               "uncapped", "--backend", "process", "--out", str(out)]  # fmt: skip
    join = f'echo $$ > {small_parent}/cgroup.procs && exec "$@"'
    done = subprocess.run(["sh", "-c", join, "sh", *command], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    with reading(out) as store:
        (record,) = store.records()
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.HOST_PRESSURE)
    assert record.limits["memory_ceiling_bytes"] is None
    assert record.evidence.oom_kills >= 1 and record.evidence.outside_oom_kills >= 1
    assert (record.evidence.host_oom_kills or 0) >= 1
    (note,) = [n for n in record.evidence.notes if n.startswith("the kernel's OOM killer")]
    assert ", at the limit of /" in note  # a cgroup's limit (an ancestor), not the host's
    assert f"{small_parent.name}, a limit that is not the trial's own ceiling" in note
    assert "python3" in note and "oom_memcg=" in note
    assert leftovers(record.run_id, out) == []


FILL_THEN_EMPTY = "dd if=/dev/zero of=/app/blob bs=1M count=64; rm -f /app/blob; exit 1"
SAY_FULL = "echo 'pip: [Errno 28] No space left on device' >&2; exit 1"


def test_a_full_disk_is_decided_by_the_disk_not_by_what_the_agent_printed(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """A 16 MiB trial disk filled and emptied again within a few milliseconds, between two
    samples, is still storage_exhausted: its image kept the blocks. The same words printed on an
    empty disk are the agent's own, failed. Before, both were storage_exhausted."""
    filled = make_task("filled", solve=FILL_THEN_EMPTY, storage_mb=16)
    record = _run_one(filled, tmp_path / "filled")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED)
    ceiling = record.evidence.storage_ceiling_bytes
    assert ceiling == 16 << 20 and (record.evidence.storage_written_bytes or 0) > ceiling * 0.8
    said = make_task("said", solve=SAY_FULL, storage_mb=16)
    record = _run_one(said, tmp_path / "said")
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    assert not record.evidence.storage_full
    assert (record.evidence.storage_written_bytes or ceiling) < ceiling // 4
    (note,) = [n for n in record.evidence.notes if "No space left on device' in the" in n]
    assert "never held more than" in note and "not a full disk" in note
