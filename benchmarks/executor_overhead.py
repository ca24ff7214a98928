"""Claim: the Ray executor adds little per trial to the local one: a trial is one Ray task
(submit, lease a worker, pickle the trial there and the record back, `ray.wait`), which is small
beside a sandbox's own start and teardown.

Measures, in one run on this machine, the same trivial trials (oracle `touch /app/done` under
strict limits in the process sandbox) one at a time through `LocalExecutor` (concurrency 1) and
through `RayExecutor` (max_in_flight 1) on a local single-node Ray; the time per trial is the gap
between successive commits, after a warm-up that starts Ray's workers. Prints medians, p90s, the
per-trial overhead and the ratio, and Ray's own start-up once. Run as root:
`python benchmarks/executor_overhead.py [trials]`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from levelfield.executor.local import Admission, LocalExecutor
from levelfield.executor.ray import RayExecutor, import_ray
from levelfield.plan import Trial, plan_trials
from levelfield.policy import PRESETS
from levelfield.records import TrialRecord
from levelfield.runner import TrialContext
from levelfield.sandbox import BackendOptions, get_backend
from levelfield.store import Store
from levelfield.tasks import load_dataset

TASK_TOML = """version = "1.0"
[environment]
cpus = 1
memory_mb = 64
storage_mb = 64
[agent]
timeout_sec = 30
[verifier]
timeout_sec = 30
"""
TEST_SH = """#!/bin/bash
if test -e /app/done; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def write_dataset(root: Path, n_tasks: int) -> Path:
    """Trivial Harbor tasks: the solution touches a file the test looks for."""
    for i in range(n_tasks):
        task = root / f"tiny-{i}"
        for part in ("environment", "tests", "solution"):
            (task / part).mkdir(parents=True)
        (task / "task.toml").write_text(TASK_TOML)
        (task / "instruction.md").write_text("Touch /app/done.\n")
        (task / "environment" / "Dockerfile").write_text(
            "FROM debian:bookworm-slim\nWORKDIR /app\n"
        )
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntouch /app/done\n")
        (task / "tests" / "test.sh").write_text(TEST_SH)
    return root


Timings = tuple[list[float], list[float]]  # (gaps between commits, trials' own duration_s)


def commit_gaps(
    execute: Callable[[Store, Callable[[TrialRecord], None]], int], run_dir: Path
) -> Timings:
    """Seconds between successive commits: with one trial in flight, the wall time per trial;
    beside it, the time the runner itself measured inside each trial."""
    stamps: list[float] = []
    inside: list[float] = []

    def on_trial(record: TrialRecord) -> None:
        stamps.append(time.perf_counter())
        inside.append(record.duration_s)

    with Store.open_for_writing(run_dir) as store:
        start = time.perf_counter()
        execute(store, on_trial)
    gaps = [b - a for a, b in zip([start, *stamps[:-1]], stamps, strict=True)]
    return gaps[1:], inside[1:]  # the first gap holds the executor's per-call setup


def ms(values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[-1]
    return f"median {statistics.median(values) * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f} ms"


def local_timings(trials: list[Trial], run_dir: Path, warmup: list[Trial]) -> Timings:
    backend = get_backend("process", BackendOptions("bench-local", run_dir))
    executor = LocalExecutor(
        backend, TrialContext("bench-local", run_dir, "process"), 1, Admission.for_this_host()
    )
    try:
        commit_gaps(lambda store, cb: executor.execute(warmup, store, cb), run_dir / "warmup")
        return commit_gaps(lambda store, cb: executor.execute(trials, store, cb), run_dir)
    finally:
        backend.reap("bench-local")


def ray_timings(trials: list[Trial], run_dir: Path, warmup: list[Trial]) -> Timings:
    """The warm-up starts and imports levelfield in Ray's worker processes."""
    executor = RayExecutor(TrialContext("bench-ray", run_dir, "process"), max_in_flight=1)
    commit_gaps(lambda store, cb: executor.execute(warmup, store, cb), run_dir / "warmup")
    return commit_gaps(lambda store, cb: executor.execute(trials, store, cb), run_dir)


def main(n: int = 30) -> None:
    ray = import_ray()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = load_dataset(write_dataset(root / "dataset", n)).tasks
        trials = plan_trials(tasks, ["oracle"], [PRESETS["strict"]])
        warmup = plan_trials(tasks[:3], ["oracle"], [PRESETS["strict"]], window="warmup")
        t = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        started_s = time.perf_counter() - t
        try:
            local, local_inside = local_timings(trials, root / "local", warmup)
            remote, remote_inside = ray_timings(trials, root / "ray", warmup)
        finally:
            ray.shutdown()
    ratio = statistics.median(remote) / statistics.median(local)
    print(f"{n} trivial trials, one in flight, process sandbox, strict limits; wall per trial:")
    print(f"local executor       {ms(local)}   (inside the trial {ms(local_inside)})")
    print(f"ray executor         {ms(remote)}   (inside the trial {ms(remote_inside)})")
    overhead = [
        statistics.median(g) - statistics.median(i)
        for g, i in ((local, local_inside), (remote, remote_inside))
    ]
    print(
        f"dispatch per trial   local {overhead[0] * 1e3:6.1f} ms   ray {overhead[1] * 1e3:6.1f} ms"
    )
    print(f"ratio ray/local      {ratio:.2f}x (median wall per trial)")
    print(f"ray start (once)     {started_s:7.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
