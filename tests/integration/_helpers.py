"""Running real trials from tests, and checking that nothing of them is left on the host."""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

from levelfield.config import RunConfig
from levelfield.executor import run
from levelfield.plan import plan_trials
from levelfield.policy import Policy
from levelfield.records import TrialRecord
from levelfield.runner import TrialContext, run_trial
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.sandbox.cgroups import PREFIX, detect
from levelfield.sandbox.disks import mounted_images, mounts_under
from levelfield.store import reading
from levelfield.tasks import load_task


def run_records(dataset: Path, out: Path, **options: object) -> list[TrialRecord]:
    run(RunConfig(dataset=dataset, out=out, **options))  # type: ignore[arg-type]
    with reading(out) as store:
        return list(store.records())


def run_one(task_root: Path, out: Path, policy: str, agent: str = "oracle") -> TrialRecord:
    (record,) = run_records(task_root, out, policies=[policy], agents=[agent])
    return record


def run_with_policy(task_root: Path, out: Path, policy: Policy) -> TrialRecord:
    """Through the Python API, for policies the CLI does not spell (a tight pids ceiling)."""
    (trial,) = plan_trials([load_task(task_root)], ["oracle"], [policy])
    backend = get_backend("process", BackendOptions("api-" + out.name, out))
    try:
        return run_trial(trial, backend, TrialContext("api-" + out.name, out, "process"))
    finally:
        backend.reap("api-" + out.name)


MINI_AGENT = Path(__file__).with_name("_mini_agent.py")


def mini_agent_task(make_task: Callable[..., Path], *, agent_timeout: float) -> Path:
    """A task whose answer the scripted model gives (its solution writes 42), with the minimal
    `command` agent (`_mini_agent.py`) in its workdir, run as `python3 /app/mini_agent.py`."""
    return make_task(
        "answer",
        solve="echo 42 > /app/answer.txt",
        test='test "$(cat /app/answer.txt)" = 42',
        memory_mb=256,
        agent_timeout=agent_timeout,
        files={"environment/mini_agent.py": MINI_AGENT.read_text()},
    )


def stored_count(run_dir: Path) -> int:
    """Trials committed so far, read while another process may be writing the run."""
    try:
        with sqlite3.connect(f"file:{run_dir / 'run.db'}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
    except sqlite3.Error:
        return 0


def leftovers(run_id: str, run_dir: Path) -> list[str]:
    """Cgroups, mounts and processes a run could leave behind."""
    found = [
        str(base / PREFIX / run_id)
        for base in detect().bases.values()
        if (base / PREFIX / run_id).exists()
    ]
    found += mounts_under(run_dir.resolve())
    found += [point for point, _ in mounted_images(run_dir.resolve())]  # an oci trial's disk
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    found += [line for line in ps.splitlines() if str(run_dir.resolve()) in line]
    return found
