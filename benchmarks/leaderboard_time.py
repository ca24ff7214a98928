"""Claim: `levelfield report` and `levelfield leaderboard` on the whole shared leaderboard
(55 submissions, about 24,000 trials) take at most 4 s each on 2 cores, and `leaderboard` under
2 s of CPU.

Each command runs as a user runs it, in a fresh process, `--rounds` times; printed are the
median and max wall time, the CPU time it used, and the ratio to the 4 s budget. "Warm" is what a
user meets: `levelfield import harbor` builds the run's tidy table once and keeps it in
RUN/table-cache.npz, so every analysis after the import starts from it. "Cold" deletes that file
first, so the table is built from the records again (a cache removed by hand, or stale). The
baseline is the same interpreter importing what the commands import, and nothing else: the part
of the time no analysis can remove. The load average is printed with them: on a shared 2-core
host it moves the wall time, not the CPU time.

    .venv/bin/python benchmarks/leaderboard_time.py [--run RUN] [--rounds 3]

Without --run it extracts ../shared/tb2-leaderboard/submissions.tar.gz into a temporary
directory and imports it there (the import is timed too, and not part of the claim).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

BUDGET_S = 4.0
LEADERBOARD_CPU_S = 2.0
ARCHIVE = Path(__file__).resolve().parents[1] / ".." / "shared" / "tb2-leaderboard"
LEVELFIELD = [sys.executable, "-m", "levelfield"]
IMPORTS = {
    "report": "import levelfield.cli.app, levelfield.analysis.summary, levelfield.report.terminal",
    "leaderboard": "import levelfield.cli.app, levelfield.analysis.standings, "
    "levelfield.report.leaderboard",
}


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def line(name: str, samples: list[tuple[float, float]]) -> str:
    walls = [w for w, _ in samples]
    cpus = [c for _, c in samples]
    median = statistics.median(walls)
    cpu = statistics.median(cpus)
    budget = (
        f"  cpu to {LEADERBOARD_CPU_S:g} s {cpu / LEADERBOARD_CPU_S:4.2f}"
        if name.startswith("leaderboard")
        else ""
    )
    return (
        f"{name:34s} wall median {median:5.2f} s  max {max(walls):5.2f} s  "
        f"cpu {cpu:5.2f} s  ratio to {BUDGET_S:g} s {median / BUDGET_S:4.2f}{budget}  "
        f"(load {os.getloadavg()[0]:.1f})"
    )


def imported(workdir: Path) -> Path:
    archive = ARCHIVE.resolve() / "submissions.tar.gz"
    with tarfile.open(archive) as tar:
        tar.extractall(workdir / "data", filter="data")
    run = workdir / "run"
    wall, cpu = timed([*LEVELFIELD, "import", "harbor", str(workdir / "data"), "--out", str(run)])
    print(f"{'import harbor (not in the claim)':34s} wall {wall:5.2f} s  cpu {cpu:5.2f} s")
    return run


def main(run: Path | None, rounds: int) -> None:
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp:
        run = run or imported(Path(tmp))
        cache = run / "table-cache.npz"
        for name, code in IMPORTS.items():
            imports = [timed([sys.executable, "-c", code]) for _ in range(rounds)]
            print(line(f"baseline: {name}'s imports only", imports))
        for command in (
            ["report"],
            ["leaderboard"],
            ["report", "--html"],
            ["leaderboard", "--html"],
        ):
            argv = [*LEVELFIELD, command[0], str(run)]
            if "--html" in command:
                argv += ["--html", str(Path(tmp) / "page.html")]
            cold = []
            for _ in range(rounds):
                cache.unlink(missing_ok=True)
                cold.append(timed(argv))
            warm = [timed(argv) for _ in range(rounds)]
            print(line(f"{' '.join(command)}, cold", cold))
            print(line(f"{' '.join(command)}, warm", warm))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=None, help="an imported run (else import)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    main(args.run, args.rounds)
