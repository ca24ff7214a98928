"""Claim: the quickstart's `population` agent costs what the `replay:adaptive` agent it replaced
cost, so the quickstart (378 trials) keeps the running time measured for the earlier agent set.

Sweeps examples/noise-suite with both agents under strict, 3x and uncapped, their trials
interleaved in one seeded order so that host load falls on both alike, and prints per agent the
summed, median and p90 trial time and the ratio of the sums. Run as root:
`python benchmarks/quickstart_agents.py [repeats]`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from levelfield.analysis.table import load_run
from levelfield.config import RunConfig
from levelfield.executor import run

SUITE = Path(__file__).resolve().parents[1] / "examples" / "noise-suite"
AGENTS = ("replay:adaptive", "population")


def main(repeats: int = 1) -> None:
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        config = RunConfig(
            dataset=SUITE,
            out=out,
            agents=list(AGENTS),
            policies=["strict", "3x", "uncapped"],
            repeats=repeats,
            concurrency=2,
        )
        started = time.perf_counter()
        run(config)
        wall = time.perf_counter() - started
        trials = load_run(out).trials
    sums = {}
    for agent in AGENTS:
        seconds = sorted(trials.loc[trials["agent"] == agent, "duration_s"])
        sums[agent] = sum(seconds)
        p90 = seconds[int(0.9 * (len(seconds) - 1))]
        print(
            f"{agent:16} {len(seconds)} trials  sum {sums[agent]:6.1f} s  "
            f"median {statistics.median(seconds):.2f} s  p90 {p90:.2f} s"
        )
    print(f"ratio population / replay:adaptive {sums['population'] / sums[AGENTS[0]]:.2f}")
    print(f"wall {wall:.0f} s for {len(trials)} trials, load now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
