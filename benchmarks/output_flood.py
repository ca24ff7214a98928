"""Claim: an agent that prints 1 GiB costs the harness bounded memory and disk: the harness's peak
stays under 256 MiB, and the run directory under the log cap (LOG_MAX_BYTES) plus 10 %.

Measures, in one invocation on this machine, two runs of one trial each, the `oracle` agent on a
task whose solution prints nothing (quiet) and on one whose solution prints 1 GiB
(`head -c 1G /dev/zero`, flood), each in a harness process of its own: that process's peak
resident memory and CPU time (its own, not the sandbox's: getrusage(RUSAGE_SELF) as the run
ends), the trial cgroup's CPU time as evidence records it, and the run directory's size on disk
(allocated blocks). Prints both, their ratio, and whether the goals hold. Run as root:
`python benchmarks/output_flood.py [--backend process|oci] [--gib 1]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from levelfield.sandbox._logcap import LOG_MAX_BYTES

GOAL_PEAK_BYTES = 256 << 20
GOAL_DIR_SLACK = 0.10


def write_task(root: Path, name: str, solve: str) -> None:
    task = root / name
    for part in ("environment", "tests", "solution"):
        (task / part).mkdir(parents=True, exist_ok=True)
    (task / "task.toml").write_text(
        textwrap.dedent("""\
        version = "1.0"
        [environment]
        userland = "host"
        cpus = 1
        memory_mb = 256
        storage_mb = 48
        [agent]
        timeout_sec = 300
        """)
    )
    (task / "instruction.md").write_text("Print.\n")
    (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\ntouch /app/done\n")
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n[ -f /app/done ] && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )


def child(dataset: Path, out: Path, backend: str) -> None:
    """One run in this process; prints what it cost this process, as JSON."""
    from levelfield.config import RunConfig
    from levelfield.executor import run
    from levelfield.store import reading

    config = RunConfig(dataset=dataset, out=out, backend=backend, index_probe_every_s=0)
    run(config)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    with reading(out) as store:
        record = next(iter(store.records()))
    print(json.dumps({
        "peak_bytes": usage.ru_maxrss * 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "trial_cpu_s": record.evidence.cpu_usage_s,
        "outcome": f"{record.outcome}/{record.reason}",
    }))  # fmt: skip


def allocated_bytes(root: Path) -> int:
    total, stack = 0, [os.fspath(root)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                st = entry.stat(follow_symlinks=False)
                total += st.st_blocks * 512
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
    return total


def measure(root: Path, name: str, backend: str) -> dict[str, float]:
    dataset, out = root / f"dataset-{name}", root / f"run-{name}"
    argv = [sys.executable, __file__, "--child", str(dataset), str(out), "--backend", backend]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {**found, "run_dir_bytes": allocated_bytes(out)}


def mib(n: float) -> str:
    return f"{n / (1 << 20):8.1f} MiB"


def main(backend: str, gib: int) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        root = Path(tmp)
        write_task(root / "dataset-quiet", "quiet", "true")
        write_task(root / "dataset-flood", "flood", f"head -c {gib}G /dev/zero")
        quiet = measure(root, "quiet", backend)
        flood = measure(root, "flood", backend)
    print(f"backend {backend}; one trial each: prints nothing vs prints {gib} GiB")
    print(f"{'':22}{'quiet':>14}{'flood':>14}{'ratio':>8}")
    for key, show in (("peak_bytes", mib), ("run_dir_bytes", mib)):
        print(f"{key:22}{show(quiet[key]):>14}{show(flood[key]):>14}"
              f"{flood[key] / quiet[key]:8.2f}")  # fmt: skip
    for key in ("cpu_s", "trial_cpu_s"):
        print(f"{key:22}{quiet[key]:12.2f} s{flood[key]:12.2f} s{flood[key] / quiet[key]:8.2f}")
    print(f"outcomes: quiet {quiet['outcome']}, flood {flood['outcome']}")
    dir_goal = LOG_MAX_BYTES * (1 + GOAL_DIR_SLACK)
    print(f"goal: harness peak < {mib(GOAL_PEAK_BYTES).strip()}: "
          f"{'yes' if flood['peak_bytes'] < GOAL_PEAK_BYTES else 'NO'}; "
          f"run directory < log cap {mib(LOG_MAX_BYTES).strip()} + 10 %: "
          f"{'yes' if flood['run_dir_bytes'] < dir_goal else 'NO'} "
          f"({flood['run_dir_bytes'] / LOG_MAX_BYTES:.2f}x the cap)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="process", choices=("process", "oci"))
    parser.add_argument("--gib", type=int, default=1)
    parser.add_argument("--child", nargs=2, type=Path, metavar=("DATASET", "OUT"))
    args = parser.parse_args()
    if args.child:
        child(*args.child, args.backend)
    else:
        main(args.backend, args.gib)
