"""Real enforcement on the process sandbox: the kernel kills, throttles and refuses."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from levelfield.policy import PRESETS, Policy
from levelfield.records import Outcome, Reason
from levelfield.sandbox.cgroups import PREFIX, detect

from ..conftest import MakeTask
from ._helpers import leftovers, run_one, run_records, run_with_policy, stored_count

pytestmark = pytest.mark.sandbox

# Touches every page (b"x" * n), unlike bytes(n), whose zero pages cost no memory.
ALLOC_THEN_MARK = 'python3 -c \'b = b"x" * ({mb} << 20); open("/app/done", "w").write("ok")\''


@pytest.mark.cgroup2
def test_twice_the_spec_is_oom_killed_under_strict_and_passes_under_headroom(
    make_task: MakeTask, tmp_path: Path
) -> None:
    task = make_task("spike", solve=ALLOC_THEN_MARK.format(mb=128), memory_mb=64)
    strict = run_one(task, tmp_path / "strict", "strict")
    assert (strict.outcome, strict.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
    assert strict.evidence.oom_kills >= 1 and strict.evidence.memory_failcnt > 0
    assert strict.evidence.memory_peak_bytes <= 64 << 20
    headroom = run_one(task, tmp_path / "headroom", "headroom")
    assert (headroom.outcome, headroom.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    assert headroom.evidence.oom_kills == 0
    assert headroom.evidence.memory_peak_bytes > 128 << 20  # the kernel's high-water mark
    assert headroom.limits["memory_ceiling_bytes"] == 3 * (64 << 20)


@pytest.mark.cgroup2
def test_cpu_bound_work_is_throttled_under_its_cpu_ceiling(
    make_task: MakeTask, tmp_path: Path
) -> None:
    burn = "timeout 1.5 sh -c 'while :; do :; done'"
    # Four busy loops want four CPUs; the half-CPU ceiling stays below what they get even
    # when other work keeps the host's two cores busy (the kernel throttles only real excess).
    burners = " & ".join([burn] * 4)
    task = make_task("burn", solve=f"{burners} & wait; touch /app/done", cpus=0.5)
    strict = run_one(task, tmp_path / "strict", "strict")
    assert strict.outcome is Outcome.PASSED
    assert strict.evidence.cpu_throttled_periods > 0 and strict.evidence.cpu_throttled_s > 0
    uncapped = run_one(task, tmp_path / "uncapped", "uncapped")
    assert uncapped.evidence.cpu_throttled_periods == 0
    assert len(uncapped.telemetry.samples) >= 2  # the sampler ran beside the trial


@pytest.mark.cgroup2
def test_fork_bomb_hits_the_pids_ceiling_and_the_host_is_unaffected(
    make_task: MakeTask, tmp_path: Path
) -> None:
    # The agent phase ends once the sandbox's own PID namespace is at the ceiling, so that the
    # verdict does not race the timeout where forks are slow (the cgroup v2 VM emulates its CPU).
    at_ceiling = "until [ \"$(ls /proc | grep -c '^[0-9]')\" -ge 60 ]; do sleep 0.1; done"
    bomb = f"(bomb() {{ bomb | bomb & }}; bomb); {at_ceiling}; sleep 1"
    task = make_task("bomb", solve=bomb, agent_timeout=120, memory_mb=512)
    tight = Policy(name="tight-pids", pids_max=64)
    record = run_with_policy(task, tmp_path / "bomb", tight)
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.PIDS_EXHAUSTED)
    assert record.evidence.pids_max_hits > 0
    assert subprocess.run(["true"]).returncode == 0  # the host still forks
    assert leftovers("api-bomb", tmp_path / "bomb") == []


@pytest.mark.cgroup2
def test_writing_past_the_storage_ceiling_is_storage_exhausted(
    make_task: MakeTask, tmp_path: Path
) -> None:
    fill = "dd if=/dev/zero of=/app/blob bs=1M count=32 && touch /app/done"
    task = make_task("disk", solve=fill, storage_mb=16)
    strict = run_one(task, tmp_path / "strict", "strict")
    assert (strict.outcome, strict.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED)
    assert strict.evidence.storage_full and strict.evidence.storage_ceiling_bytes == 16 << 20
    assert "No space left on device" in strict.agent_phase.output_tail
    assert run_one(task, tmp_path / "headroom", "headroom").outcome is Outcome.PASSED


INODES = "mkdir /app/many && cd /app/many && for i in $(seq 1 6000); do : > f$i || exit 1; done"


@pytest.mark.cgroup2
def test_running_out_of_files_on_the_ceilings_disk_is_storage_exhausted(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """The ceiling is a number of bytes; the disk that enforces it has a number of inodes too
    (4,096 on a 16 MiB ext4). Six thousand empty files take next to no bytes and run it out:
    that is the ceiling's disk refusing, not the agent failing its task."""
    task = make_task("files", solve=f"{INODES} && touch /app/done", storage_mb=16)
    strict = run_one(task, tmp_path / "strict", "strict")
    assert (strict.outcome, strict.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED)
    assert strict.evidence.storage_full
    assert (strict.evidence.storage_used_bytes or 0) < 8 << 20  # bytes were left
    assert "No space left on device" in strict.agent_phase.output_tail
    notes = " ".join(strict.evidence.notes)
    assert "inodes" in notes and "of 4096" in notes, notes


@pytest.mark.cgroup2
def test_floors_are_written_where_the_kernel_reads_them(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Floors are shares and protections, not kills: read them from the live trial cgroup."""
    task = make_task("floors", solve="sleep 5; touch /app/done", memory_mb=96, cpus=0.5)
    seen: dict[str, str] = {}
    trial = threading.Thread(
        target=lambda: seen.update(
            record=run_with_policy(task, tmp_path / "floors", PRESETS["headroom"])
        )
    )
    trial.start()
    try:
        seen.update(_floor_files_while_running(trial))
    finally:
        trial.join()
    host = detect()
    if host.version == 2:
        # runc's cpu.shares → cpu.weight mapping for 0.5 CPU (512 shares): 1 + 510 * 9999 // 262142
        assert (seen["memory.low"], seen["cpu.weight"]) == (str(96 << 20), "20")
        assert seen["parents memory.low"] == "max max"  # protection passes down to the trial
    else:
        assert (seen["memory.soft_limit_in_bytes"], seen["cpu.shares"]) == (str(96 << 20), "512")
    assert seen["record"].outcome is Outcome.PASSED  # type: ignore[attr-defined]


def _floor_files_while_running(trial: threading.Thread) -> dict[str, str]:
    """Once the trial's init has joined its cgroup, its limits are written: read the floors
    (v1 keeps them in two hierarchies, memory and cpu; v2 in one directory)."""
    names = ("memory.low", "cpu.weight", "memory.soft_limit_in_bytes", "cpu.shares")
    while trial.is_alive():
        found: dict[str, str] = {}
        for base in detect().bases.values():
            for trial_dir in (base / PREFIX / "api-floors").glob("*/"):
                if not _read_or_empty(trial_dir / "cgroup.procs"):
                    continue
                found |= {
                    n: _read_or_empty(trial_dir / n) for n in names if (trial_dir / n).exists()
                }
                parents = (trial_dir.parent, trial_dir.parent.parent)
                found["parents memory.low"] = " ".join(
                    _read_or_empty(p / "memory.low") for p in parents
                )
        if {"memory.low", "cpu.weight"} <= found.keys() or {
            "memory.soft_limit_in_bytes",
            "cpu.shares",
        } <= found.keys():
            return found
        time.sleep(0.02)
    raise AssertionError("the trial ended before its cgroup held a process")


def _read_or_empty(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def test_timeouts_by_phase(make_task: MakeTask, tmp_path: Path) -> None:
    slow_agent = make_task("slow-agent", solve="sleep 20; touch /app/done", agent_timeout=1)
    record = run_one(slow_agent, tmp_path / "a", "strict")
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.AGENT_TIMEOUT)
    assert record.agent_phase.timed_out and record.duration_s < 10
    slow_tests = make_task("slow-tests", test="sleep 20", verifier_timeout=1)
    record = run_one(slow_tests, tmp_path / "v", "strict")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.VERIFIER_TIMEOUT)


def test_the_agent_sees_no_tests_no_network_and_no_host_files(
    make_task: MakeTask, tmp_path: Path
) -> None:
    probe = (
        "ls -A /tests > /app/tests_seen; ls -A / > /app/root_seen; "
        "grep -c : /proc/net/dev > /app/interfaces; touch /app/done"
    )
    task = make_task(
        "probe",
        solve=probe,
        test="test ! -s /app/tests_seen && test -s /tests/test.sh && "
        "! grep -qx work /app/root_seen && ! grep -qx home /app/root_seen && "
        'test "$(cat /app/interfaces)" = 1',
    )
    record = run_one(task, tmp_path / "r", "strict")
    assert record.outcome is Outcome.PASSED, record


def test_background_processes_live_until_the_verifier_then_nothing_is_left(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """The grader cannot see the agent's processes (it stands apart), but it sees their work: a
    heartbeat the daemon keeps writing is fresh while the grader runs."""
    task = make_task(
        "daemon",
        solve="nohup setsid bash -c 'while :; do date +%s%N > /app/beat; sleep 0.05; done' "
        ">/dev/null 2>&1 & touch /app/done",
        test='a=$(cat /app/beat); sleep 0.5; [ "$(cat /app/beat)" != "$a" ]',
    )
    records = run_records(task, tmp_path / "r", policies=["strict"], repeats=2, concurrency=2)
    assert [r.outcome for r in records] == [Outcome.PASSED, Outcome.PASSED]
    assert all("while :" in " ".join(r.evidence.left_running) for r in records)
    assert leftovers(records[0].run_id, tmp_path / "r") == []
    assert not list((tmp_path / "r" / "trials").glob("*/work/*"))  # workspaces removed


def test_a_missing_solution_or_trajectory_is_refused_before_the_run(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Bad input, not the agent's failure: the run is refused with every such task named, as a
    user meets it on the command line (exit 2), and no trial is stored. Before, each trial was
    stored as failed/agent_error."""
    make_task("fine", files={"trajectories/lean.json": '{"steps": [{"command": "true"}]}'})
    broken = make_task("no-solution")
    (broken / "solution" / "solve.sh").unlink()
    dataset = broken.parent
    for agent, problem in (
        ("oracle", "no-solution: " + str(broken / "solution" / "solve.sh") + " is missing"),
        ("replay:lean", "trajectories/lean.json: trajectory not found"),
    ):
        out = tmp_path / agent.replace(":", "-")
        done = subprocess.run(
            [sys.executable, "-m", "levelfield", "run", str(dataset), "--agent", agent,
             "--out", str(out)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        assert problem in " ".join((done.stdout + done.stderr).split()), done.stderr
        assert "fine:" not in done.stderr  # the task that has its input is not named
        assert stored_count(out) == 0


def test_a_floor_the_host_can_never_hold_is_refused_as_an_infra_error(
    make_task: MakeTask, tmp_path: Path
) -> None:
    task = make_task("greedy", cpus=64)
    record = run_one(task, tmp_path / "r", "strict")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.SANDBOX_ERROR)
    assert "exceeds this host" in (record.error or "")


def test_the_three_presets_exist() -> None:
    assert set(PRESETS) == {"strict", "headroom", "uncapped"}
