"""The Harbor environment's pure parts: `--ek` options, the exec's shell wrapper (run by a real
bash), which counter names which kill, and what an import reads beside result.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest

from levelfield import errors
from levelfield.harbor.beside import KILLED_NOTE, read_beside, with_beside
from levelfield.harbor.box import ExecCall, ceiling_hit, shell_command
from levelfield.harbor.options import parse_options
from levelfield.harbor.trial_file import read_trial
from levelfield.outcome import levelfield_reason
from levelfield.policy import PRESETS, apply_policy
from levelfield.records import Evidence, PhaseResult, Reason
from levelfield.tasks import Spec

SPEC = Spec(cpus=1.0, memory_bytes=256 << 20, storage_bytes=1 << 30)


@pytest.mark.parametrize(
    ("kwargs", "policy", "memory_ceiling_mib"),
    [
        ({}, "strict", 256),
        ({"policy": "strict"}, "strict", 256),
        ({"policy": "3x"}, "headroom", 768),
        ({"floor": "1x", "ceiling": "3x"}, "headroom", 768),
        ({"ceiling": None}, "uncapped", None),  # Harbor parses `--ek ceiling=None` as None
        ({"ceiling": "none", "backend": "process"}, "uncapped", None),
        ({"policy": "1x/2x", "uv_shim": True}, "1x/2x", 512),
    ],
)
def test_ek_options_give_the_policy_applied_to_the_spec(
    kwargs: dict[str, object], policy: str, memory_ceiling_mib: int | None
) -> None:
    resolved = parse_options(kwargs).resolved_policy()
    limits = apply_policy(resolved, SPEC)
    assert resolved.name == policy
    expected = memory_ceiling_mib << 20 if memory_ceiling_mib else None
    assert limits.memory_ceiling_bytes == expected


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"celing": "3x"}, "celing"),  # a typo Harbor's base class would swallow
        ({"policy": "3x", "ceiling": "2x"}, "not both"),
        ({"policy": "loose"}, "unknown policy 'loose'"),
        ({"floor": "4x", "ceiling": "2x"}, "above its ceiling"),
        ({"backend": "kubernetes"}, "backend"),
    ],
)
def test_bad_ek_options_are_refused_with_what_this_environment_reads(
    kwargs: dict[str, object], said: str
) -> None:
    with pytest.raises(errors.RunConfigError, match="--ek") as caught:
        parse_options(kwargs)
    assert said in str(caught.value)


def _bash(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )


def test_the_wrapper_keeps_exit_code_cwd_and_output_and_leaves_no_pid_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "sub").mkdir()
    pid_file = tmp_path / "exec.pid"
    call = ExecCall("pwd; echo err >&2; exit 3", cwd=str(tmp_path / "sub"))
    done = _bash(shell_command(call, pid_file=PurePosixPath(pid_file)), tmp_path)
    assert done.returncode == 3
    assert done.stdout.strip() == str(tmp_path / "sub")
    assert "err" in done.stderr
    assert not pid_file.exists()


def test_a_killed_command_exits_137_and_its_process_group_can_be_killed_whole(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "exec.pid"
    wrapped = shell_command(ExecCall("kill -KILL $BASHPID"), pid_file=PurePosixPath(pid_file))
    killed = _bash(wrapped, tmp_path)
    assert killed.returncode == 137
    # a command with a child: killing the group named in the pid file ends both
    marker = tmp_path / "child-alive"
    call = ExecCall(f"(sleep 30; touch {marker}) & sleep 30")
    proc = subprocess.Popen(["bash", "-c", shell_command(call, pid_file=PurePosixPath(pid_file))])
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        subprocess.run(["sleep", "0.05"], check=True)
    group = int(pid_file.read_text())
    subprocess.run(["kill", "-KILL", "--", f"-{group}"], check=True)
    assert proc.wait(timeout=10) == 137
    assert not _live_members(group), "the child outlived its group's kill"
    assert not marker.exists()


def _live_members(group: int) -> list[str]:
    """Members of the process group that are not zombies (killed ones wait to be reaped)."""
    table = subprocess.run(["ps", "-e", "-o", "pgid=,stat="], capture_output=True, text=True)
    rows = [line.split() for line in table.stdout.splitlines()]
    return [stat for pgid, stat in rows if int(pgid) == group and not stat.startswith("Z")]


def _result(code: int | None = 137, timed_out: bool = False) -> PhaseResult:
    return PhaseResult(exit_code=code, timed_out=timed_out)


def test_the_counter_that_grew_during_the_exec_names_the_kill() -> None:
    strict = apply_policy(PRESETS["strict"], SPEC)
    before = Evidence(oom_kills=1, pids_max_hits=2)
    oom = ceiling_hit(before, Evidence(oom_kills=2, memory_peak_bytes=256 << 20), strict,
                      _result(), "")  # fmt: skip
    assert isinstance(oom, errors.LevelfieldOOMKilled)
    assert str(oom).startswith("memory ceiling 256 MiB hit, oom_kill=1 (exit 137")
    pids = ceiling_hit(before, Evidence(oom_kills=1, pids_max_hits=5), strict, _result(1), "")
    assert isinstance(pids, errors.LevelfieldPidsExhausted)
    assert "pids ceiling 4096 hit, pids.events max=3" in str(pids)
    # "No space left on device" is a full disk only where the disk shows it (the rule a native
    # trial is decided by): the agent's own words over a disk that never neared its ceiling
    # are its own failure, not the ceiling's.
    ceiling = strict.storage_ceiling_bytes or 0
    near = Evidence(storage_ceiling_bytes=ceiling, storage_written_bytes=ceiling - (1 << 20))
    full = ceiling_hit(Evidence(), near, strict, _result(1), "cp: No space left on device")
    assert isinstance(full, errors.LevelfieldStorageExhausted)
    far = near.model_copy(update={"storage_written_bytes": 1 << 20})
    assert ceiling_hit(Evidence(), far, strict, _result(1), "cp: No space left on device") is None
    filled = ceiling_hit(Evidence(), Evidence(storage_full=True), strict, _result(1), "")
    assert isinstance(filled, errors.LevelfieldStorageExhausted)
    assert ceiling_hit(before, before, strict, _result(), "") is None  # an earlier exec's kill
    uncapped = apply_policy(PRESETS["uncapped"], SPEC)
    assert ceiling_hit(Evidence(), Evidence(), uncapped, _result(1), "No space left") is None


def test_levelfield_exceptions_stored_by_name_map_to_their_reasons() -> None:
    assert levelfield_reason("LevelfieldOOMKilled") is Reason.OOM_KILLED
    assert levelfield_reason("LevelfieldPidsExhausted") is Reason.PIDS_EXHAUSTED
    assert levelfield_reason("LevelfieldStorageExhausted") is Reason.STORAGE_EXHAUSTED
    assert levelfield_reason("SandboxStartError") is Reason.SANDBOX_ERROR
    assert levelfield_reason("RuntimeError") is None
    assert levelfield_reason("Path") is None  # a name in errors' namespace, not an error


def _trial_folder(tmp_path: Path, *, exit_code: str | None, log: str, reward: float) -> Path:
    folder = tmp_path / "job" / "spike__abc"
    (folder / "agent").mkdir(parents=True)
    result = {
        "task_name": "spike",
        "trial_name": "spike__abc",
        "verifier_result": {"rewards": {"reward": reward}},
        "exception_info": None,
    }
    (folder / "result.json").write_text(json.dumps(result))
    if exit_code is not None:
        (folder / "agent" / "exit-code.txt").write_text(exit_code)
    (folder / "agent" / "oracle.txt").write_text(log)
    return folder


def test_a_sigkilled_agent_with_no_exception_keeps_its_reward_and_is_flagged(
    tmp_path: Path,
) -> None:
    log = "building\n/solution/solve.sh: line 3:    39 Killed    python3 -c '...'\n"
    folder = _trial_folder(tmp_path, exit_code="137", log=log, reward=0.0)
    beside = read_beside(str(folder), read_trial(str(folder)), {"agent"})
    assert (
        beside is not None
        and beside.agent_exit_code == 137
        and "Killed" in (beside.killed_line or "")
    )
    fields = {"reason": Reason.TESTS_FAILED, "evidence": {"notes": ("imported",)}}
    flagged = with_beside(fields, beside, None)
    assert flagged["reason"] is Reason.TESTS_FAILED
    note = flagged["evidence"]["notes"][-1]
    assert note.startswith(KILLED_NOTE) and "137 (SIGKILL)" in note and "Killed" in note
    # a trial that passed, or one Harbor booked an exception for, is not searched for a kill
    passed = _trial_folder(tmp_path / "p", exit_code="137", log=log, reward=1.0)
    assert read_beside(str(passed), read_trial(str(passed)), {"agent"}) is None
    calm = _trial_folder(tmp_path / "c", exit_code="1", log="AssertionError\n", reward=0.0)
    quiet = read_beside(str(calm), read_trial(str(calm)), {"agent"})
    assert quiet is not None and quiet.agent_exit_code == 1
    assert with_beside(fields, quiet, None)["evidence"]["notes"] == ("imported",)


def test_levelfield_harbor_imports_without_harbor_and_says_what_the_environment_needs() -> None:
    script = (
        "import sys; sys.modules['harbor'] = None\n"  # as on a Python where Harbor is absent
        "import levelfield.harbor as h\n"
        "from levelfield.harbor.importing import import_harbor\n"
        "try:\n    h.LevelfieldEnvironment\nexcept ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "pip install 'levelfield[harbor]'" in done.stdout and "3.12" in done.stdout
