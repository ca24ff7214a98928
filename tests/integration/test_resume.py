"""`kill -9` of the harness mid-run, then the same command again: every trial exactly once,
and no cgroup, process, mount or workspace left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from levelfield.agents import AgentOptions
from levelfield.config import RunConfig
from levelfield.errors import RunConfigError
from levelfield.executor import run as run_levelfield
from levelfield.records import ModelBudget
from levelfield.store import reading

from ..conftest import MakeTask
from ._helpers import leftovers, stored_count

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def _command(dataset: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "levelfield",
        "run",
        str(dataset),
        "--out",
        str(out),
        "--policy",
        "strict",
        "--policy",
        "uncapped",
        "--repeats",
        "2",
        "--concurrency",
        "2",
    ]


@pytest.mark.cgroup2
def test_kill_9_mid_run_then_resume_runs_every_trial_exactly_once(
    make_task: MakeTask, tmp_path: Path
) -> None:
    for name in ("a", "b", "c"):
        root = make_task(name, solve="sleep 1.5; touch /app/done")
    out = tmp_path / "run"
    harness = subprocess.Popen(
        _command(root.parent, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    # No deadline: under emulation (the cgroup v2 VM) the harness's start alone takes ~30 s.
    while stored_count(out) < 3 and harness.poll() is None:
        time.sleep(0.1)
    assert stored_count(out) >= 3, "the harness never stored a trial"
    os.kill(harness.pid, signal.SIGKILL)
    harness.wait()
    interrupted = stored_count(out)
    assert interrupted < 12, "the run finished before it could be killed"

    resumed = subprocess.run(
        _command(root.parent, out), capture_output=True, text=True, timeout=900
    )  # a guard against a hang, not a measure: emulated trials are ~30x slower
    assert resumed.returncode == 0, resumed.stderr
    assert f"{12 - interrupted} trials to run ({interrupted} already stored)" in resumed.stderr
    with reading(out) as store:
        records = list(store.records())
        run_id = store.meta()["run_id"]
    keys = [r.trial_key for r in records]
    assert len(keys) == len(set(keys)) == 12
    assert all(r.outcome.value == "passed" for r in records)
    assert leftovers(run_id, out) == []
    assert not list((out / "trials").glob("*/work/*")) and not list(out.glob("trials/*/disk.img"))


def test_ctrl_c_stops_cleanly_and_keeps_finished_trials(
    make_task: MakeTask, tmp_path: Path
) -> None:
    for name in ("a", "b"):
        root = make_task(name, solve="sleep 2; touch /app/done")
    out = tmp_path / "run"
    harness = subprocess.Popen(
        _command(root.parent, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while stored_count(out) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    harness.send_signal(signal.SIGINT)
    _, stderr = harness.communicate(timeout=60)
    assert harness.returncode == 130 and "run the same command to resume" in stderr
    with reading(out) as store:
        run_id = store.meta()["run_id"]
        assert all(r.outcome.value == "passed" for r in store.records())  # no half-done trial
    assert leftovers(run_id, out) == []


def test_two_harnesses_reaping_the_same_dead_runs_at_once_both_finish() -> None:
    """Two Harbor processes that start together each reap what dead ones left; the runs one of
    them removes vanish under the other's feet, which must not fail its trial."""
    import threading

    from levelfield.sandbox.cgroups import PREFIX, detect, reap

    from ..conftest import missing_sandbox_prerequisites, require

    require(missing_sandbox_prerequisites(), "cgroups")
    host = detect()
    runs = [f"reap-race-{os.getpid()}-{i}" for i in range(60)]
    for run in runs:
        for base in host.bases.values():
            (base / PREFIX / run / "trial").mkdir(parents=True)
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def reaper() -> None:
        start.wait()
        for run in runs:
            try:
                reap(host, run)
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

    threads = [threading.Thread(target=reaper) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert not [r for r in runs for b in host.bases.values() if (b / PREFIX / r).exists()]


def test_a_run_resumed_under_another_model_budget_is_refused(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """The budget is part of the configuration its trials ran under: stored with the run and
    each trial, and a resume that would mix two budgets in one run is refused."""
    root = make_task("t")
    first = AgentOptions(budget=ModelBudget(max_tokens=1000))
    config = RunConfig(dataset=root.parent, out=tmp_path / "r", backend="process",
                       agent_options=first)  # fmt: skip
    run_levelfield(config)
    with reading(tmp_path / "r") as store:
        (record,) = list(store.records())
        assert store.meta()["budget"] == {"max_tokens": 1000, "max_cost_usd": None}
    assert record.budget == first.budget
    other = AgentOptions(budget=ModelBudget(max_tokens=2000))
    with pytest.raises(RunConfigError, match="another configuration"):
        run_levelfield(config.model_copy(update={"agent_options": other}))
    assert run_levelfield(config).already_stored == 1  # the same budget resumes
