"""Claim: the `levelfield import harbor` command on the whole shared leaderboard (55 submissions,
about 24,000 Harbor trials), start-up and the analysis table it prepares included, costs at most
2x merely walking its folders and `json.load`-ing every result.json, in wall time and in CPU time.

Baseline: a Python process that walks the extracted archive and `json.load`s every result.json
(the least any import must do, its interpreter start included). Subject: the command itself, a
process of its own, into a fresh run each round (start-up, walk, read, check rewards, label,
classify, flag, one SQLite transaction, the tidy table's cache). The two alternate for
`--rounds` rounds (3), so that a busy host weighs on both; the best of each (the least disturbed
by other work) gives the ratio, in wall time and in CPU time (user + system of the child
process). The start-up alone (`levelfield import harbor --help`) is printed beside it.
`--profile` times the import's stages in this process (the walk and reading, the flags, building
the records, SQLite). The archive is extracted once into a temporary directory (never into the
project), or read from `--extracted DIR`.

    .venv/bin/python benchmarks/harbor_import.py [--rounds 3] [--extracted DIR] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from levelfield.harbor import importing
from levelfield.harbor.flags import flag_submissions
from levelfield.store import Store, without_cycle_collection

ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "tb2-leaderboard" / "submissions.tar.gz"


def parse_only(root: Path) -> int:
    parsed = 0
    for dirpath, _dirs, files in os.walk(root):
        if "result.json" in files:
            with open(os.path.join(dirpath, "result.json"), "rb") as file:
                json.loads(file.read())
            parsed += 1
    return parsed


def profile(root: Path, out: Path) -> None:
    """Where an import's CPU time goes, its stages run one after the other as import_harbor
    runs them and timed apart (a profiler's own cost would weigh on the Python parts only):
    the walk and reading of the files (parsing included), the flags, building the records, and
    SQLite's insert of them."""
    tally = importing._Tally()
    timings: dict[str, float] = {}

    def stage(name: str, step: Callable[[], object]) -> object:
        start = time.process_time()
        result = step()
        timings[name] = time.process_time() - start
        return result

    with without_cycle_collection():  # as the import runs
        found = stage(
            "walk and read the files", lambda: importing._read_path(root, None, tally, None)
        )
        by_label: dict[str, list] = {}
        jobs: dict[str, list[str]] = {}
        for item in found:  # type: ignore[attr-defined]
            by_label.setdefault(item.label, []).append(item.trial)
            jobs.setdefault(item.label, []).append(item.job)
        stage("flags", lambda: flag_submissions(by_label, jobs))
        rows = stage(
            "build the records", lambda: list(importing._new_rows(found, "x", set(), tally))
        )
        with Store.open_for_writing(out) as store:
            stage("SQLite", lambda: store.commit_rows(rows))  # type: ignore[arg-type]
    total = sum(timings.values())
    print(
        "profile (cpu): "
        + ", ".join(f"{name} {t:.2f} s ({100 * t / total:.0f} %)" for name, t in timings.items())
    )


WALK = """
import json, os, sys
n = 0
for dirpath, _dirs, files in os.walk(sys.argv[1]):
    if "result.json" in files:
        with open(os.path.join(dirpath, "result.json"), "rb") as file:
            json.load(file)
        n += 1
print(n)
"""


def command(argv: list[str]) -> tuple[float, float]:
    """Wall and CPU time (user + system) of one child process running `argv`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--extracted", type=Path, help="An already extracted copy.")
    parser.add_argument("--profile", action="store_true", help="Profile one more import.")
    args = parser.parse_args()
    levelfield = [sys.executable, "-m", "levelfield"]
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        root = args.extracted
        if root is None:
            root = scratch / "submissions"
            with tarfile.open(ARCHIVE) as archive:
                archive.extractall(root, filter="data")
        files = parse_only(root)  # a first pass warms the page cache for both
        times: dict[str, list[tuple[float, float]]] = {"walk": [], "import": [], "start": []}
        for i in range(args.rounds):
            out = scratch / f"run{i}"
            times["walk"].append(command([sys.executable, "-c", WALK, str(root)]))
            times["import"].append(
                command([*levelfield, "import", "harbor", str(root), "--out", str(out)])
            )
            times["start"].append(command([*levelfield, "import", "harbor", "--help"]))
            shutil.rmtree(out)  # a fresh run each round, removed untimed
            print(
                f"round {i + 1}: walk + json.load {times['walk'][-1][0]:.2f} s "
                f"(cpu {times['walk'][-1][1]:.2f} s, {files} files), import command "
                f"{times['import'][-1][0]:.2f} s (cpu {times['import'][-1][1]:.2f} s), "
                f"start-up {times['start'][-1][0]:.2f} s (cpu {times['start'][-1][1]:.2f} s)"
            )
        for what, at in (("wall", 0), ("cpu", 1)):
            walk, full, start = (min(t[at] for t in times[k]) for k in ("walk", "import", "start"))
            print(
                f"{what}: best of {args.rounds}: walk + json.load {walk:.2f} s, import command "
                f"{full:.2f} s (start-up {start:.2f} s of it): ratio {full / walk:.2f}x "
                "(claim: at most 2x)"
            )
        if args.profile:
            profile(root, scratch / "profiled")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
