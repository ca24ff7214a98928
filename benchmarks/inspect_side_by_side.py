"""Claim: through Inspect (inspect-harbor's samples and grader, Inspect's scripted model calling
the bash tool with each task's solution), levelfield's sandbox books the memory spike's kill as a
sample error naming the kill, left out of the score, under strict on process and oci, and lets it
pass under 3x; Inspect's own `docker` sandbox is what Inspect would otherwise run it on.

One `inspect eval` per configuration, in a seeded order, each over the same tasks:
  levelfield strict    `--sandbox levelfield:policy=strict,uv_shim=true`   (auto: process or oci)
  levelfield 3x        `--sandbox levelfield:policy=3x,uv_shim=true`
  inspect docker       inspect-harbor's own sandbox (`docker`, its compose file)
The tasks: examples/harbor/memory-spike as an image task (oci) and on the host's userland
(process), and TB2's regex-log (oci). Seconds per sample are Inspect's own (`total_time`), so the
CLI's start-up is left out; the eval's wall time is printed apart.

Run as root after `scripts/setup.sh test`:
`.venv/bin/python benchmarks/inspect_side_by_side.py [repeats]` (default 1, ~2 min on 2 cores).
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
INSPECT = REPO / ".venv-inspect" / "bin" / "inspect"
TASKS = REPO / "tests" / "integration" / "_inspect_tasks.py"
TB2 = REPO.parent / "shared" / "tb2-sample" / "regex-log"
SPIKE = REPO / "examples" / "harbor" / "memory-spike"
CONFIGS = {
    "levelfield strict": ["--sandbox", "levelfield:policy=strict,uv_shim=true"],
    "levelfield 3x": ["--sandbox", "levelfield:policy=3x,uv_shim=true"],
    "inspect docker": [],  # inspect-harbor's samples name Inspect's docker sandbox
}


def dataset(root: Path) -> Path:
    data = root / "dataset"
    shutil.copytree(SPIKE, data / "spike-image")
    shutil.copytree(SPIKE, data / "spike-host")
    toml = data / "spike-host" / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]", '[environment]\nuserland = "host"'))
    (data / "regex-log").symlink_to(TB2)
    return data


def run_eval(name: str, data: Path, logs: Path) -> tuple[float, str, Any]:
    """(wall seconds, what the CLI said last, the log or None)."""
    from inspect_ai.log import read_eval_log

    env = {
        **os.environ,
        "DOCKER_HOST": os.environ.get("DOCKER_HOST", "unix:///run/podman/podman.sock"),
    }
    command = [
        str(INSPECT), "eval", f"{TASKS}@harbor_scripted", "-T", f"path={data}",
        "--log-dir", str(logs), "--no-fail-on-error", "--display", "plain", *CONFIGS[name],
    ]  # fmt: skip
    t0 = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=logs.parent)
    wall = time.monotonic() - t0
    said = " ".join((done.stdout + done.stderr).split())[-300:]
    found = sorted(logs.glob("*.eval"))
    return wall, said, read_eval_log(str(found[-1])) if found else None


def verdict(sample: Any) -> str:
    if sample.error is not None:
        retried = f" (after {len(sample.error_retries)} retries)" if sample.error_retries else ""
        return f"error: {sample.error.message[:90]}{retried}"
    value = next(iter(sample.scores.values())).value if sample.scores else None
    return f"score {value}"


def main(repeats: int = 1) -> None:
    rng = random.Random(0)
    order = [name for _ in range(repeats) for name in CONFIGS]
    rng.shuffle(order)
    seconds: dict[tuple[str, str], list[float]] = defaultdict(list)
    verdicts: dict[tuple[str, str], set[str]] = defaultdict(set)
    walls: dict[str, list[float]] = defaultdict(list)
    refused: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="inspect-side-by-side-") as tmp:
        data = dataset(Path(tmp))
        os.environ.setdefault("LEVELFIELD_HARBOR_DIR", str(Path(tmp) / "cache"))
        for n, name in enumerate(order):
            wall, said, log = run_eval(name, data, Path(tmp) / f"logs-{n}")
            walls[name].append(wall)
            if log is None or not log.samples:
                refused[name] = said
                continue
            for sample in log.samples:
                seconds[(name, str(sample.id))].append(float(sample.total_time or 0.0))
                verdicts[(name, str(sample.id))].add(verdict(sample))
            print(f"{name}: {wall:.1f} s wall", file=sys.stderr)
    for name in CONFIGS:
        print(f"\n{name} (eval wall, median {statistics.median(walls[name]):.1f} s)")
        if name in refused:
            print(f"  refused before any sample: {refused[name]}")
            continue
        for task in ("spike-host", "spike-image", "regex-log"):
            times = seconds[(name, task)]
            said = "; ".join(sorted(verdicts[(name, task)]))
            print(f"  {task:12} {statistics.median(times):6.1f} s  {said}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
