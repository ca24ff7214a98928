"""Claim: importing the 55 shared leaderboard submissions (about 24,000 Harbor trials), labelled
by submission, costs at most 3x merely parsing their JSON files.

Baseline: walk the extracted archive and `json.loads` every result.json (the least any import must
do). Subject: `levelfield.harbor.importing.import_harbor` of the same folder into a fresh run
(walk, read, label, classify, flag, validate what came from the files, one SQLite transaction).
The two alternate for `--rounds` rounds, so that a busy host weighs on both. Prints each round's
times, the ratio of the medians and that of the best times (the least disturbed by other work),
in wall time and in this process's CPU time. The archive is extracted once into a temporary
directory (never into the project), or read from `--extracted DIR`.

    .venv/bin/python benchmarks/harbor_import.py [--rounds 5] [--extracted DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tarfile
import tempfile
import time
from pathlib import Path

from levelfield.harbor.importing import import_harbor

ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "tb2-leaderboard" / "submissions.tar.gz"


def parse_only(root: Path) -> int:
    parsed = 0
    for dirpath, _dirs, files in os.walk(root):
        if "result.json" in files:
            with open(os.path.join(dirpath, "result.json"), "rb") as file:
                json.loads(file.read())
            parsed += 1
    return parsed


def import_once(root: Path, out: Path) -> int:
    result = import_harbor([root], out)
    assert len(result.submissions) >= 2, "labelled by submission"
    return result.imported


def timed(step: object, *args: object) -> tuple[float, float, int]:
    """Wall time, CPU time of this process (what a busy shared host distorts least), result."""
    start, cpu = time.perf_counter(), time.process_time()
    count = step(*args)  # type: ignore[operator]
    return time.perf_counter() - start, time.process_time() - cpu, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extracted", type=Path, help="An already extracted copy.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        root = args.extracted
        if root is None:
            root = scratch / "submissions"
            with tarfile.open(ARCHIVE) as archive:
                archive.extractall(root, filter="data")
        parse_only(root)  # a first pass warms the page cache for both
        wall: dict[str, list[float]] = {"parse": [], "import": []}
        cpu: dict[str, list[float]] = {"parse": [], "import": []}
        for i in range(args.rounds):
            p_wall, p_cpu, files = timed(parse_only, root)
            i_wall, i_cpu, trials = timed(import_once, root, scratch / f"run{i}")
            shutil.rmtree(scratch / f"run{i}")  # a fresh run each round, removed untimed
            for name, w, c in (("parse", p_wall, p_cpu), ("import", i_wall, i_cpu)):
                wall[name].append(w)
                cpu[name].append(c)
            print(
                f"round {i + 1}: parse {p_wall:.2f} s (cpu {p_cpu:.2f} s, {files} files), "
                f"import {i_wall:.2f} s (cpu {i_cpu:.2f} s, {trials} trials)"
            )
        for what, times in (("wall", wall), ("cpu", cpu)):
            parse, full = statistics.median(times["parse"]), statistics.median(times["import"])
            best = min(times["import"]) / min(times["parse"])
            print(
                f"{what}: median parse {parse:.2f} s, import {full:.2f} s, ratio "
                f"{full / parse:.2f}x; best of each {best:.2f}x (claim: at most 3x)"
            )
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
