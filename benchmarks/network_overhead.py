"""Claim: a process trial's own network namespace (veth, NAT rules, teardown) adds < 100 ms to a
trial with network, and the network meter at its production rate costs < 1 % of a core.

Measures, in one run on this machine: a full process sandbox life (start, one exec, evidence,
close) for a task without network and for the same task with network (its own namespace); and
the meter's CPU time over a few seconds of sampling at NET_SAMPLE_EVERY_S against a live
namespace. Prints medians, p90s and the ratios. Run as root:
`python benchmarks/network_overhead.py`.
"""

from __future__ import annotations

import dataclasses
import resource
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from levelfield.network import NET_SAMPLE_EVERY_S, NetworkMeter
from levelfield.policy import PRESETS, apply_policy
from levelfield.sandbox import BackendOptions
from levelfield.sandbox.process import ProcessBackend
from levelfield.tasks import Spec, Task

SPEC = Spec(cpus=1.0, memory_bytes=64 << 20, storage_bytes=64 << 20)
METER_SECONDS = 5.0


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


def tiny_task(root: Path, network: bool) -> Task:
    for part in ("environment", "tests", "solution"):
        (root / part).mkdir(parents=True, exist_ok=True)
    task = Task(name="tiny", path=root, spec=SPEC, instruction="", agent_timeout_s=10,
                verifier_timeout_s=10, build_timeout_s=10, workdir=Path("/app"))  # type: ignore[arg-type]
    return dataclasses.replace(task, allow_internet=network)


def thread_cpu_s() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(
        resource.RUSAGE_SELF
    ).ru_stime


def main(n: int = 30) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        backend = ProcessBackend(BackendOptions("netbench", run_dir))
        limits = apply_policy(PRESETS["strict"], SPEC)
        counter = iter(range(10**6))

        def life(task: Task) -> Callable[[], None]:
            def one() -> None:
                trial_dir = run_dir / "trials" / str(next(counter))
                trial_dir.mkdir(parents=True)
                box = backend.start(task, limits, trial_id=trial_dir.name, trial_dir=trial_dir)
                try:
                    box.exec("true", timeout_s=10, log_path=trial_dir / "x.log")
                    box.evidence()
                finally:
                    box.close()

            return one

        try:
            closed = timings(life(tiny_task(run_dir / "a", False)), n)
            own = timings(life(tiny_task(run_dir / "b", True)), n)
            print(f"trial without network       {ms(closed)}")
            print(f"trial with its own netns    {ms(own)}")
            extra = statistics.median(own) - statistics.median(closed)
            print(f"added by the namespace      {extra * 1e3:6.1f} ms "
                  f"(ratio {statistics.median(own) / statistics.median(closed):.2f})")
            meter_cost(backend, tiny_task(run_dir / "c", True), limits, run_dir)
        finally:
            backend.reap("netbench")


def meter_cost(backend: ProcessBackend, task: Task, limits: object, run_dir: Path) -> None:
    trial_dir = run_dir / "trials" / "meter"
    trial_dir.mkdir(parents=True)
    box = backend.start(task, limits, trial_id="meter", trial_dir=trial_dir)  # type: ignore[arg-type]
    try:
        idle = threading.Event()
        before = thread_cpu_s()
        idle.wait(METER_SECONDS)
        baseline = thread_cpu_s() - before
        before = thread_cpu_s()
        with NetworkMeter(box.observables().network_pid) as meter:
            idle.wait(METER_SECONDS)
        cost = thread_cpu_s() - before - baseline
        reads = METER_SECONDS / NET_SAMPLE_EVERY_S
        print(f"meter every {NET_SAMPLE_EVERY_S * 1e3:.0f} ms: {cost * 1e3:.1f} ms CPU over "
              f"{METER_SECONDS:.0f} s = {100 * cost / METER_SECONDS:.2f} % of a core "
              f"({cost / reads * 1e6:.0f} µs a reading; phases {list(meter.uses())})")
    finally:
        box.close()


if __name__ == "__main__":
    main()
