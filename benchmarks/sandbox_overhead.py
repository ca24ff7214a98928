"""Claim: the process sandbox adds < 50 ms per trial (cgroup, disk, namespaces, teardown) to a
bare subprocess of the same command, and its telemetry sampler costs < 1 % of a core. Of the
per-exec part, loading the seccomp profile on the way in (`_seccomp.filtered_argv`) is measured
alone: the same `true` run through it and run bare.

Measures, in one run on this machine: a bare `bash -c true`; the same command through a full
sandbox life (start with strict limits on a 64 MiB / 1 CPU / 64 MiB-disk spec, one exec, evidence,
close); and the sampler's own CPU time over a few seconds of sampling at its production rate.
Prints medians, p90s and the ratios.  Run as root: `python benchmarks/sandbox_overhead.py`.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from levelfield.policy import PRESETS, apply_policy
from levelfield.sandbox import BackendOptions
from levelfield.sandbox._seccomp import filtered_argv
from levelfield.sandbox.process import ProcessBackend
from levelfield.tasks import Spec, Task
from levelfield.telemetry import SAMPLE_EVERY_S, Sampler

SPEC = Spec(cpus=1.0, memory_bytes=64 << 20, storage_bytes=64 << 20)


def timings(action: Callable[[], None], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        action()
        out.append(time.perf_counter() - t)
    return out


def ms(values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[-1]
    return f"median {statistics.median(values) * 1e3:6.1f} ms  p90 {p90 * 1e3:6.1f} ms"


def tiny_task(root: Path) -> Task:
    for part in ("environment", "tests", "solution"):
        (root / part).mkdir(parents=True, exist_ok=True)
    return Task(name="tiny", path=root, spec=SPEC, instruction="", agent_timeout_s=10,
                verifier_timeout_s=10, build_timeout_s=10, workdir=Path("/app"))  # type: ignore[arg-type]


def main(n: int = 40) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        task = tiny_task(run_dir / "task")
        backend = ProcessBackend(BackendOptions("bench", run_dir))
        limits = apply_policy(PRESETS["strict"], SPEC)
        counter = iter(range(10**6))

        def sandboxed() -> None:
            trial_dir = run_dir / "trials" / str(next(counter))
            trial_dir.mkdir(parents=True)
            box = backend.start(task, limits, trial_id=trial_dir.name, trial_dir=trial_dir)
            box.exec("true", timeout_s=10, log_path=trial_dir / "agent.log")
            box.evidence()
            box.close()

        bare = timings(lambda: subprocess.run(["bash", "-c", "true"], check=True), n)
        boxed = timings(sandboxed, n)
        backend.reap("bench")
        overhead = statistics.median(boxed) - statistics.median(bare)
        print(f"bare subprocess      {ms(bare)}")
        print(f"process sandbox      {ms(boxed)}")
        print(f"overhead per trial   {overhead * 1e3:6.1f} ms   "
              f"ratio {statistics.median(boxed) / statistics.median(bare):.1f}x")
        print(f"sampler              {sampler_share(backend, task, limits, run_dir):.3%} of a core "
              f"at one reading every {SAMPLE_EVERY_S} s")
        plain = timings(lambda: subprocess.run(["true"], check=True), n)
        filtered = timings(lambda: subprocess.run(filtered_argv(["true"]), check=True), n)
        print(f"exec, bare           {ms(plain)}")
        print(f"exec, under filter   {ms(filtered)}   "
              f"+{(statistics.median(filtered) - statistics.median(plain)) * 1e3:.1f} ms per exec")


def sampler_share(backend: ProcessBackend, task: Task, limits, run_dir: Path) -> float:  # type: ignore[no-untyped-def]
    """CPU time of the sampling thread (thread_time inside it) over wall time."""
    trial_dir = run_dir / "trials" / "sampler"
    trial_dir.mkdir(parents=True)
    box = backend.start(task, limits, trial_id="sampler", trial_dir=trial_dir)
    try:
        cpu = []
        sampler = Sampler(box)
        original = sampler._take

        def measured_take() -> None:
            t = time.thread_time()
            original()
            cpu.append(time.thread_time() - t)

        sampler._take = measured_take  # type: ignore[method-assign]
        wall = time.perf_counter()
        with sampler:
            time.sleep(5)
        return sum(cpu) / (time.perf_counter() - wall)
    finally:
        box.close()
        backend.reap("bench")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
