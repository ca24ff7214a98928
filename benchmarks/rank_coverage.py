"""Claim: the rank confidence sets of `levelfield leaderboard` cover the true ranks at least as
often as their level says (95 %), on leaderboards whose true scores are known.

Each design is simulated `--sims` times (analysis/simulate_ranks.py: tasks drawn with a
difficulty and a task × entry deviation whose spread reproduces Terminal-Bench 2.0's measured
variances, K trials each). Printed per design: the share of leaderboards whose simultaneous sets
covered every entry's rank, the share of entries whose marginal set covered its rank (mean and
the worst entry), the share whose could-be-#1 set held every true #1, the mean set sizes, and the
mean number of tiers. Coverage below 95 % by more than 2 Monte Carlo SEs would contradict the
claim. `--from RUN` adds a design whose true scores are that leaderboard's measured scores. The
rank sets themselves are deterministic (analysis/ranks.py: Holm's step-down, nothing drawn); only
the simulated leaderboards are seeded.

    .venv/bin/python benchmarks/rank_coverage.py [--sims 500] [--from RUN]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from levelfield.analysis.simulate_ranks import Design, rank_coverage

DESIGNS = (
    Design("10 tied (every null true)", (0.6,) * 10),
    Design("10 tied, K = 1", (0.6,) * 10, repeats=1),
    Design("10 spaced 2 pts", tuple(0.8 - 0.02 * i for i in range(10))),
    Design("10 spaced 5 pts", tuple(0.85 - 0.05 * i for i in range(10))),
    Design(
        "20: 5 tied at the top, then 3 pts apart",
        (0.8,) * 5 + tuple(0.77 - 0.03 * i for i in range(15)),
    ),
    Design("55 spread like TB2 (85 to 10)", tuple(np.round(np.linspace(0.85, 0.10, 55) ** 0.9, 3))),
)


def measured_design(run_dir: Path) -> Design:
    from levelfield.analysis.standings import leaderboard
    from levelfield.analysis.table import load_run

    board = leaderboard(load_run(run_dir).trials)
    scores = tuple(round(e.score.mean, 4) for e in board.entries)
    return Design(f"{len(scores)} at the measured scores of {run_dir.name}", scores)


def main(sims: int, run_dir: Path | None) -> None:
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}; {sims} leaderboards per design")
    designs = [*DESIGNS, *([measured_design(run_dir)] if run_dir else [])]
    header = (
        f"{'design':46s} {'entries':>7s} {'simult.':>8s} {'marginal':>9s} {'worst':>6s} "
        f"{'#1 set':>7s} {'|sim|':>6s} {'|marg|':>6s} {'|#1|':>5s} {'tiers':>5s} {'s':>5s}"
    )
    print(header)
    for design in designs:
        start = time.perf_counter()
        c = rank_coverage(design, n_sims=sims, seed=1)
        print(
            f"{design.name:46s} {c.n_entries:7d} {c.simultaneous:8.3f} {c.marginal:9.3f} "
            f"{c.marginal_worst:6.3f} {c.first:7.3f} {c.simultaneous_width:6.1f} "
            f"{c.marginal_width:6.1f} {c.first_size:5.1f} {c.tiers:5.1f} "
            f"{time.perf_counter() - start:5.0f}"
        )
    print(f"Monte Carlo SE of a share near 0.95: {(0.95 * 0.05 / sims) ** 0.5:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=500)
    parser.add_argument("--from", dest="run_dir", type=Path, default=None)
    args = parser.parse_args()
    main(args.sims, args.run_dir)
