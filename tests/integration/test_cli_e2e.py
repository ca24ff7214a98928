"""The commands a user types, end to end on the real sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from levelfield.sandbox.cgroups import detect

from ..conftest import EXAMPLES, MakeTask

pytestmark = pytest.mark.sandbox


def _levelfield(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "levelfield", *args], capture_output=True, text=True, timeout=300
    )


def test_run_twice_then_results_as_table_and_json(tmp_path: Path) -> None:
    out = tmp_path / "r1"
    first = _levelfield(
        "run",
        str(EXAMPLES / "basics"),
        "--agent",
        "oracle",
        "--policy",
        "strict",
        "--repeats",
        "2",
        "--concurrency",
        "2",
        "--out",
        str(out),
    )
    assert first.returncode == 0, first.stderr
    more = _levelfield(
        "run",
        str(EXAMPLES / "basics"),
        "--agent",
        "oracle",
        "--floor",
        "1x",
        "--ceiling",
        "3x",
        "--out",
        str(out),
    )  # same run, more trials
    assert more.returncode == 0 and "(0 already stored)" in more.stderr
    table = _levelfield("results", str(out))
    assert "memory-spike" in table.stdout and "oom_killed" in table.stdout
    rows = json.loads(_levelfield("results", str(out), "--json").stdout)
    assert len(rows) == 6 and {r["policy"] for r in rows} == {"strict", "headroom"}
    spike = next(r for r in rows if r["task"] == "memory-spike" and r["policy"] == "strict")
    assert spike["outcome"] == "infra_error" and spike["evidence"]["oom_kills"] >= 1
    assert spike["telemetry"]["host"]["trials_in_flight"] >= 1
    assert {"agent", "verifier", "start"} <= spike["telemetry"]["phase_s"].keys()


def test_tasks_check_with_nop_flags_a_task_that_tests_nothing(
    make_task: MakeTask, tmp_path: Path
) -> None:
    make_task("honest")
    root = make_task("hollow", test="true")
    done = _levelfield("tasks", "check", str(root.parent), "--with-nop")
    assert done.returncode == 1
    assert "passes with the nop agent" in done.stdout and "1 with problems" in done.stdout


@pytest.mark.cgroup2
def test_doctor_reports_what_this_host_enforces() -> None:
    done = _levelfield("doctor")
    assert done.returncode == 0, done.stdout
    version = detect().version
    cgroup = "cgroup unified" if version == 2 else "cgroup memory"
    for check in ("cgroup version", cgroup, "bubblewrap", "storage ceiling"):
        assert check in done.stdout
    assert f"cgroup v{version}:" in done.stdout
    if version == 2:  # the controllers were really enabled down to a trial's parent
        assert "memory, cpu and pids delegated" in done.stdout and "memory floor" in done.stdout
    wide = subprocess.run(  # one line per check: what an agent's shell holds, from inside one
        [sys.executable, "-m", "levelfield", "doctor"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "400"},
    )  # fmt: skip
    shell = next(line for line in wide.stdout.splitlines() if "agent shell (process)" in line)
    assert "CapEff 00000000a00405fb" in shell and "no-new-privileges on" in shell, shell
    assert "seccomp filter (1 filter)" in shell, shell  # loaded on the way in of its exec
