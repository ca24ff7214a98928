"""Claim: the grader standing apart (its own disk, namespaces and witness) costs tens of ms per
trial over grading inside the agent's sandbox, as the verifier phase did before.

Measures, in one run, interleaved, on one started sandbox per backend: the verifier phase as it
was (the tests copied into the sandbox, `bash test.sh` exec'd there) against the grader apart
(`sandbox/grader.py`: its disk made and mounted, the backend's view built, the tests copied in,
test.sh run in its own namespaces under the witness, its logs kept, the disk released). Two
graders: a trivial one (`true`), and one that opens its tests 2,000 times, where every open is a
permission event the witness answers. Prints medians, p90s and the ratios.

Run as root: `python benchmarks/grader_apart.py [process|podman|docker ...]`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from levelfield.masking import Masker
from levelfield.policy import PRESETS, apply_policy
from levelfield.sandbox import BackendOptions, Sandbox, get_backend, grader
from levelfield.tasks import load_task

ENGINES = {
    "podman": "unix:///run/podman/podman.sock",
    "docker": "unix:///run/levelfield-docker.sock",
}
GRADERS = {
    "trivial": "true",
    "2,000 opens": 'for i in $(seq 2000); do read -r _ < "$TESTS/test.sh"; done',
}


def ms(values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[-1]
    return f"median {statistics.median(values) * 1e3:7.1f} ms  p90 {p90 * 1e3:7.1f} ms"


def write_task(root: Path, image: bool) -> Path:
    for part in ("environment", "tests", "solution"):
        (root / part).mkdir(parents=True, exist_ok=True)
    userland = "" if image else 'userland = "host"\n'
    (root / "task.toml").write_text(
        f'version = "1.0"\n[environment]\n{userland}cpus = 1\nmemory_mb = 256\nstorage_mb = 256\n'
    )
    (root / "instruction.md").write_text("Nothing.\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    (root / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    return root


def in_sandbox(box: Sandbox, tests: Path, command: str, trial_dir: Path) -> None:
    """The verifier phase as it was: the tests copied into the sandbox, test.sh run there."""
    box.copy_in(tests, PurePosixPath("/tmp/tests"))
    box.exec(f"TESTS=/tmp/tests; {command}", timeout_s=60, log_path=trial_dir / "old.log")


def apart(box: Sandbox, tests: Path, command: str, trial_dir: Path) -> None:
    judge = grader.Grader.start(box, trial_dir)
    assert judge is not None, "this backend cannot start the grader apart here"
    try:
        judge.copy_in(tests, grader.TESTS)
        judge.run(f"TESTS=/tests; {command}", timeout_s=60, log_path=trial_dir / "new.log")
        judge.keep_logs(trial_dir / "kept")
    finally:
        judge.close()


def measure(kind: str, n: int) -> None:
    if kind in ENGINES:
        os.environ["DOCKER_HOST"] = ENGINES[kind]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        task = load_task(write_task(run_dir / "task", image=kind != "process"))
        backend = get_backend(
            "process" if kind == "process" else "oci", BackendOptions("bench", run_dir)
        )
        trial_dir = run_dir / "trials" / "t"
        trial_dir.mkdir(parents=True)
        limits = apply_policy(PRESETS["strict"], task.spec)
        box = backend.start(task, limits, trial_id="t", trial_dir=trial_dir, secrets=Masker())
        try:
            for name, command in GRADERS.items():
                steps: dict[str, Callable[[], None]] = {
                    "in the sandbox": lambda c=command: in_sandbox(
                        box, task.tests_dir, c, trial_dir
                    ),
                    "apart": lambda c=command: apart(box, task.tests_dir, c, trial_dir),
                }
                times: dict[str, list[float]] = {label: [] for label in steps}
                for _ in range(n):  # interleaved: the host's load falls on both alike
                    for label, step in steps.items():
                        t = time.perf_counter()
                        step()
                        times[label].append(time.perf_counter() - t)
                old, new = (statistics.median(times[k]) for k in steps)
                print(f"{kind:<8} {name:<12} in the sandbox {ms(times['in the sandbox'])}")
                print(
                    f"{'':<8} {'':<12} apart          {ms(times['apart'])}   "
                    f"+{(new - old) * 1e3:.0f} ms, ratio {new / old:.2f}x"
                )
        finally:
            box.close()
            backend.reap("bench")


def main() -> None:
    kinds = sys.argv[1:] or ["process", "podman", "docker"]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    for kind in kinds:
        measure(kind, n=15)


if __name__ == "__main__":
    main()
