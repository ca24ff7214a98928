"""Claim: the statistics layer analyses a million trials in under 10 s on a 2-core machine.

Shape: 500 tasks × 5 policies × 2 agents × 200 repeats = 1 000 000 trials with reasons, memory,
throttling and host telemetry (levelfield.analysis.simulate). Timed separately: building the
table (baseline, not part of the claim), `summarize` (every figure of the report, bootstrap at its
default 2000 resamples), `compare` by policy and by agent, and one 10 000-resample task-level
bootstrap of all ten configurations. Prints median and max over `--rounds` and trials/s.

    .venv/bin/python benchmarks/analysis_scale.py [--rounds 3] [--tasks 500] [--repeats 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from levelfield.analysis import compare, summarize
from levelfield.analysis._tidy import rates_of
from levelfield.analysis.estimators import bootstrap_means
from levelfield.analysis.simulate import simulate_trials

POLICIES = {"1x": 1.0, "1.5x": 1.5, "2x": 2.0, "3x": 3.0, "uncapped": float("inf")}


def timings(step: Callable[[], object], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        step()
        out.append(time.perf_counter() - start)
    return out


def bootstrap_all(trials: object, n_resamples: int) -> None:
    rates = rates_of(trials)  # type: ignore[arg-type]
    for _, group in rates.groupby(["agent", "policy"], sort=True):
        bootstrap_means(group[["score", "clean", "infra_rate"]].to_numpy(), n_resamples, seed=0)


def main(rounds: int = 3, n_tasks: int = 500, repeats: int = 200) -> None:
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, numpy {np.__version__}")
    build = timings(
        lambda: simulate_trials(
            n_tasks=n_tasks, agents=("a", "b"), policies=POLICIES, repeats=repeats, seed=1
        ),
        1,
    )
    trials = simulate_trials(
        n_tasks=n_tasks, agents=("a", "b"), policies=POLICIES, repeats=repeats, seed=1
    )
    n = len(trials)
    steps: dict[str, Callable[[], object]] = {
        "summarize": lambda: summarize(trials),
        "compare by policy": lambda: compare(trials, by="policy"),
        "compare by agent": lambda: compare(trials, by="agent"),
        "bootstrap 10 000 × 10 configs": lambda: bootstrap_all(trials, 10_000),
    }
    print(f"{n:,} trials; building the table (baseline) {build[0]:.2f} s")
    total = 0.0
    for name, step in steps.items():
        times = timings(step, rounds)
        median = statistics.median(times)
        total += median
        print(
            f"{name:32s} median {median:6.2f} s  max {max(times):6.2f} s  "
            f"{n / median:>12,.0f} trials/s"
        )
    verdict = "meets" if total < 10 else "MISSES"
    print(f"{'all four':32s} median {total:6.2f} s  {n / total:>12,.0f} trials/s: {verdict} < 10 s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    main(args.rounds, args.tasks, args.repeats)
