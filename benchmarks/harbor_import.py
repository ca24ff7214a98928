"""Claim: importing the whole shared leaderboard (55 submissions, about 24,000 Harbor trials),
labelled by submission, costs at most 2x merely walking its folders and parsing its JSON files,
in wall time and in CPU time.

Baseline: walk the extracted archive and `json.loads` every result.json (the least any import must
do). Subject: one `levelfield.harbor.importing.import_harbor` call on the same folder into a fresh
run (walk, read, check rewards, label, classify, flag, one SQLite transaction). The two
alternate for `--rounds` rounds, so that a busy host weighs on both. Prints each round's times,
the ratio of the medians and that of the best times (the least disturbed by other work), in wall
time and in this process's CPU time, and where an import's CPU time goes (`--profile`: the
walk and reading, the flags, building the records, SQLite). The import parses with pydantic_core's
`from_json` where a file fits its fields (harbor/result_fields.py); the same walk parsed with
from_json is printed too, so that the
import's own overhead can be read apart from the faster parser. The archive is extracted once
into a temporary directory (never into the project), or read from `--extracted DIR`.

    .venv/bin/python benchmarks/harbor_import.py [--rounds 5] [--extracted DIR] [--profile]
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
from collections.abc import Callable
from pathlib import Path

from pydantic_core import from_json

from levelfield.harbor import importing
from levelfield.harbor.flags import flag_submissions
from levelfield.harbor.importing import import_harbor
from levelfield.store import Store

ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "tb2-leaderboard" / "submissions.tar.gz"


def parse_only(root: Path, parse: Callable[[bytes], object] = json.loads) -> int:
    parsed = 0
    for dirpath, _dirs, files in os.walk(root):
        if "result.json" in files:
            with open(os.path.join(dirpath, "result.json"), "rb") as file:
                parse(file.read())
            parsed += 1
    return parsed


def import_once(root: Path, out: Path) -> int:
    result = import_harbor([root], out)
    assert len(result.submissions) >= 2, "labelled by submission"
    return result.imported


def timed(step: Callable[..., int], *args: object) -> tuple[float, float, int]:
    """Wall time, CPU time of this process (what a busy shared host distorts least), result."""
    start, cpu = time.perf_counter(), time.process_time()
    count = step(*args)
    return time.perf_counter() - start, time.process_time() - cpu, count


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

    with importing._without_cycle_collection():  # as the import runs
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--extracted", type=Path, help="An already extracted copy.")
    parser.add_argument("--profile", action="store_true", help="Profile one more import.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        root = args.extracted
        if root is None:
            root = scratch / "submissions"
            with tarfile.open(ARCHIVE) as archive:
                archive.extractall(root, filter="data")
        parse_only(root)  # a first pass warms the page cache for both
        steps = ("parse", "from_json", "import")
        wall: dict[str, list[float]] = {name: [] for name in steps}
        cpu: dict[str, list[float]] = {name: [] for name in steps}
        for i in range(args.rounds):
            p_wall, p_cpu, files = timed(parse_only, root)
            f_wall, f_cpu, _ = timed(parse_only, root, from_json)
            i_wall, i_cpu, trials = timed(import_once, root, scratch / f"run{i}")
            shutil.rmtree(scratch / f"run{i}")  # a fresh run each round, removed untimed
            for name, w, c in zip(
                steps, (p_wall, f_wall, i_wall), (p_cpu, f_cpu, i_cpu), strict=True
            ):
                wall[name].append(w)
                cpu[name].append(c)
            print(
                f"round {i + 1}: parse {p_wall:.2f} s (cpu {p_cpu:.2f} s, {files} files), "
                f"from_json {f_wall:.2f} s (cpu {f_cpu:.2f} s), "
                f"import {i_wall:.2f} s (cpu {i_cpu:.2f} s, {trials} trials)"
            )
        for what, times in (("wall", wall), ("cpu", cpu)):
            parse, full = statistics.median(times["parse"]), statistics.median(times["import"])
            fast = statistics.median(times["from_json"])
            best = min(times["import"]) / min(times["parse"])
            print(
                f"{what}: median parse {parse:.2f} s, import {full:.2f} s, ratio "
                f"{full / parse:.2f}x; best of each {best:.2f}x (claim: at most 2x); "
                f"against the walk parsed with from_json ({fast:.2f} s) {full / fast:.2f}x"
            )
        if args.profile:
            profile(root, scratch / "profiled")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
