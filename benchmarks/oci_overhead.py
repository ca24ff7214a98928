"""Claim: a container costs a trial well under a second over the process sandbox.

Per trial, on one trivial task (image already built and cached): start (create + start the
container / cgroup + bubblewrap init; under headroom, so with the storage ceiling's disk), one
`exec` of `true`, one `copy_in` of a small tests/ directory (into the workdir), one `read_file`,
and close (remove). Both backends run in the same invocation, alternating, so host load affects
both alike. Prints the median and p90 of each phase per backend and the ratio of the per-trial
medians. Needs root, an engine (scripts/oci_setup.sh) and the
stand-in bases (`levelfield images offline-bases`).

    python benchmarks/oci_overhead.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from levelfield.policy import PRESETS, apply_policy
from levelfield.sandbox import Backend, BackendOptions, oci, process
from levelfield.tasks import Task, load_task

PHASES = ("start", "exec", "copy_in", "read_file", "close", "trial")
COPIED = PurePosixPath("/app/tests")


def make_task(root: Path) -> Task:
    task = root / "trivial"
    for part in ("environment", "tests", "solution"):
        (task / part).mkdir(parents=True)
    (task / "task.toml").write_text("[environment]\ncpus = 1\nmemory_mb = 256\nstorage_mb = 256\n")
    (task / "instruction.md").write_text("Nothing.\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    return load_task(task)


def one_trial(backend: Backend, task: Task, trial_id: str, work: Path) -> dict[str, float]:
    limits = apply_policy(PRESETS["headroom"], task.spec)
    times: dict[str, float] = {}

    def timed(name: str, step: Callable[[], object]) -> object:
        t = time.perf_counter()
        result = step()
        times[name] = time.perf_counter() - t
        return result

    trial_dir = work / trial_id
    t0 = time.perf_counter()
    box = timed(
        "start", lambda: backend.start(task, limits, trial_id=trial_id, trial_dir=trial_dir)
    )
    try:
        timed("exec", lambda: box.exec("true", timeout_s=30, log_path=trial_dir / "exec.log"))  # type: ignore[attr-defined]
        # into the workdir: /tests is the grader's own, apart from the sandbox on both backends
        timed("copy_in", lambda: box.copy_in(task.tests_dir, COPIED))  # type: ignore[attr-defined]
        timed("read_file", lambda: box.read_file(COPIED / "test.sh"))  # type: ignore[attr-defined]
    finally:
        timed("close", box.close)  # type: ignore[attr-defined]
    times["trial"] = time.perf_counter() - t0
    return times


def summary(samples: list[dict[str, float]], phase: str) -> tuple[float, float]:
    values = sorted(s[phase] for s in samples)
    return statistics.median(values), values[int(0.9 * (len(values) - 1))]


def main(n: int = 20) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        task = make_task(work / "dataset")
        backends: dict[str, Backend] = {
            "process": process.create(BackendOptions("bench-process", work)),
            "oci": oci.create(BackendOptions("bench-oci", work)),
        }
        for name, backend in backends.items():
            problems = backend.check()
            if problems:
                sys.exit(f"{name}: {'; '.join(problems)}")
            one_trial(backend, task, f"warmup-{name}", work)  # builds/caches the image
        results: dict[str, list[dict[str, float]]] = {name: [] for name in backends}
        for i in range(n):
            for name, backend in backends.items():
                results[name].append(one_trial(backend, task, f"{name}-{i}", work))
    print(f"per-trial sandbox overhead, n={n} each, median / p90 in ms")
    print(f"{'phase':<10}" + "".join(f"{name:>22}" for name in results))
    for phase in PHASES:
        cells = []
        for samples in results.values():
            median, p90 = summary(samples, phase)
            cells.append(f"{median * 1000:>12.1f} / {p90 * 1000:>7.1f}")
        print(f"{phase:<10}" + "".join(cells))
    ratio = summary(results["oci"], "trial")[0] / summary(results["process"], "trial")[0]
    print(f"ratio oci/process (trial median): {ratio:.1f}x")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
