"""Claim: Harbor's trials cost no more on levelfield's Harbor environment than on Harbor's own
`podman` environment, and on a task that briefly needs more than its 1x memory spec Harbor books
the kill as the agent's failure while levelfield (through Harbor, or natively) books it as an
infrastructure error with the kernel's evidence.

The same tasks with the same oracle, one trial at a time, in a seeded interleaved order, through:
  harbor/podman      `harbor run -e podman --memory limit --override-memory-mb <spec>`
  harbor/levelfield  `harbor run -e levelfield.harbor:LevelfieldEnvironment --ek policy=strict`
  levelfield         `levelfield run --policy strict` (the native runner)
Seconds per trial come from each harness's own trial record (Harbor: started_at → finished_at;
levelfield: duration_s), so the CLI's own start-up is left out; it is printed apart. Every
Harbor job is then read by `levelfield import harbor`, so that the three verdicts are read alike.

This machine has no registry and no internet (PyPI, Debian and npm only). TB2 tasks name a
Docker Hub image (`docker_image`): each is built here from its Dockerfile on the stand-in bases
and tagged with that name, so all three harnesses run the identical image. Their verifiers fetch
uv from astral.sh: levelfield places its uv shim (`uv_shim`), and Harbor's podman gets the same
uv and CPython mounted by a compose overlay (`--extra-docker-compose`).

Run as root after `scripts/setup.sh test`: `.venv/bin/python benchmarks/harbor_side_by_side.py
[repeats]` (default 1: 4 tasks x 3 harnesses, ~10 min on 2 cores).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from levelfield.harbor.importing import import_harbor
from levelfield.sandbox.oci._offline import DEFAULT_CACHE_DIR, UV_SHIM_INSTALL, UV_VERSION
from levelfield.store import reading

REPO = Path(__file__).resolve().parents[1]
HARBOR_BIN = REPO / ".venv-harbor" / "bin"
TB2 = REPO.parent / "shared" / "tb2-sample"
TB2_TASKS = ("cancel-async-tasks", "regex-log", "log-summary-date-ranges")
SPIKE = "memory-spike"  # examples/harbor: briefly needs ~1.2x its 256 MiB spec
HARNESSES = ("harbor/podman", "harbor/levelfield", "levelfield")
PODMAN = "unix:///run/podman/podman.sock"
SEED = 20261203


@dataclass(frozen=True)
class Trial:
    harness: str
    task: str
    seconds: float
    wall_s: float
    verdict: str  # outcome/reason as levelfield reads it
    said: str  # what the harness itself wrote


def main(repeats: int = 1) -> None:
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.1f}, seed {SEED}")
    env = {**os.environ, "PATH": f"{HARBOR_BIN}:{os.environ['PATH']}", "DOCKER_HOST": PODMAN,
           "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tasks = {name: TB2 / name for name in TB2_TASKS}
        # a copy: podman's conmon leaves an empty file named `oom` in its working directory,
        # which Harbor sets to the task's environment/, when the kernel OOM-kills the container
        tasks[SPIKE] = Path(shutil.copytree(REPO / "examples" / "harbor" / SPIKE, root / SPIKE))
        for name in TB2_TASKS:
            _tag_pinned_image(tasks[name])
        overlay = _uv_overlay(root / "uv")
        env["LEVELFIELD_HARBOR_DIR"] = str(root / "levelfield-harbor")
        plan = [(h, t, r) for h in HARNESSES for t in tasks for r in range(repeats)]
        random.Random(SEED).shuffle(plan)
        trials = []
        for i, (harness, task, _) in enumerate(plan, 1):
            trial = _run(harness, task, tasks[task], root / f"t{i}", env, overlay)
            print(f"[{i}/{len(plan)}] {harness:17} {task:24} {trial.seconds:6.1f} s  "
                  f"{trial.verdict:24} {trial.said}", flush=True)  # fmt: skip
            trials.append(trial)
    _print_times(trials, list(tasks))
    _print_verdicts(trials)
    print(f"load now {os.getloadavg()[0]:.1f}")


def _run(harness: str, task: str, task_dir: Path, out: Path, env: dict, overlay: Path) -> Trial:
    dataset = out / "dataset"
    dataset.mkdir(parents=True)
    (dataset / task).symlink_to(task_dir)
    spec_mb = _memory_mb(task_dir)
    if harness == "levelfield":
        command = [sys.executable, "-m", "levelfield", "run", str(dataset), "--agent", "oracle",
                   "--policy", "strict", "--uv-shim", "--out", str(out / "run")]  # fmt: skip
    else:
        command = [str(HARBOR_BIN / "harbor"), "run", "-p", str(dataset), "-a", "oracle",
                   "-o", str(out / "jobs"), "-y", "-q"]  # fmt: skip
        command += (
            ["-e", "podman", "--memory", "limit", "--override-memory-mb", str(spec_mb),
             "--extra-docker-compose", str(overlay)]
            if harness == "harbor/podman"
            else ["-e", "levelfield.harbor:LevelfieldEnvironment", "--ek", "policy=strict",
                  "--ek", "uv_shim=true"]
        )  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{harness} on {task} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    if harness == "levelfield":
        with reading(out / "run") as store:
            (record,) = list(store.records())
        verdict = f"{record.outcome.value}/{record.reason.value}"
        said = f"oom_kills={record.evidence.oom_kills}, reward {record.reward}"
        return Trial(harness, task, record.duration_s, wall, verdict, said)
    (job,) = [d for d in (out / "jobs").iterdir() if d.is_dir()]
    (result,) = [json.loads(p.read_text()) for p in job.glob("*/result.json")]
    import_harbor([job], out / "imported")
    with reading(out / "imported") as store:
        (record,) = list(store.records())
    seconds = (_time(result["finished_at"]) - _time(result["started_at"])).total_seconds()
    rewards = (result.get("verifier_result") or {}).get("rewards")
    exc = result.get("exception_info")
    said = f"reward {rewards['reward'] if rewards else None}, exception_info " + (
        f"{exc['exception_type']}: {exc['exception_message'][:90]}" if exc else "null"
    )
    if any("killed, cause unknown" in n for n in record.evidence.notes):
        said += " (agent exit 137, 'Killed')"
    verdict = f"{record.outcome.value}/{record.reason.value}"
    return Trial(harness, task, seconds, wall, verdict, said)


def _print_times(trials: list[Trial], tasks: list[str]) -> None:
    base = "harbor/podman"
    print("\nseconds per trial (median over repeats), and each harness / harbor/podman")
    print(f"{'task':24}" + "".join(f"{h:>19}" for h in HARNESSES))
    medians: dict[tuple[str, str], float] = {}
    for task in tasks:
        row = f"{task:24}"
        for harness in HARNESSES:
            times = [t.seconds for t in trials if t.harness == harness and t.task == task]
            medians[(harness, task)] = statistics.median(times)
            ratio = medians[(harness, task)] / medians[(base, task)]
            row += f"{medians[(harness, task)]:10.1f} s ({ratio:4.2f})"
        print(row)
    row = f"{'all tasks (sum)':24}"
    for harness in HARNESSES:
        total = sum(medians[(harness, t)] for t in tasks)
        row += f"{total:10.1f} s ({total / sum(medians[(base, t)] for t in tasks):4.2f})"
    print(row)
    walls = {h: statistics.median(t.wall_s for t in trials if t.harness == h) for h in HARNESSES}
    print("median wall per invocation (CLI start-up included): "
          + ", ".join(f"{h} {w:.1f} s" for h, w in walls.items()))  # fmt: skip


def _print_verdicts(trials: list[Trial]) -> None:
    print(f"\nverdicts on {SPIKE} (spec 256 MiB, peak ~300 MiB) under a 1x memory ceiling")
    for harness in HARNESSES:
        for t in (t for t in trials if t.harness == harness and t.task == SPIKE):
            print(f"  {harness:17} {t.verdict:24} {t.said}")
    others = [t for t in trials if t.task != SPIKE]
    passed = sum(t.verdict == "passed/tests_passed" for t in others)
    print(f"TB2 tasks: {passed} of {len(others)} trials passed across the three harnesses")


def _tag_pinned_image(task: Path) -> None:
    """The task's pinned Docker Hub image, built here from its Dockerfile (stand-in bases)."""
    image = re.search(r'^docker_image\s*=\s*"([^"]+)"', (task / "task.toml").read_text(), re.M)
    assert image, f"{task} pins no image"
    subprocess.run(["podman", "build", "-q", "-t", image.group(1), str(task / "environment")],
                   check=True, capture_output=True)  # fmt: skip


def _uv_overlay(where: Path) -> Path:
    """What UV_SHIM_INSTALL links in for levelfield, mounted for Harbor's podman instead."""
    bin_dir = where / "bin"
    bin_dir.mkdir(parents=True)
    uv = DEFAULT_CACHE_DIR / "uv" / UV_VERSION
    python = sorted((DEFAULT_CACHE_DIR / "uv-python").glob("cpython-3.13.*"))[-1]
    for name in ("uv", "uvx"):
        (bin_dir / name).write_bytes((uv / name).read_bytes())
        (bin_dir / name).chmod(0o755)
    (bin_dir / "python3.13").symlink_to("/opt/levelfield/python/bin/python3.13")
    env_script = UV_SHIM_INSTALL.split("<<'EOF'\n", 1)[1].split("\nEOF", 1)[0]
    (bin_dir / "env").write_text(env_script + "\n")
    (where / "uv.toml").write_text("native-tls = true\n")
    overlay = where / "overlay.yaml"
    overlay.write_text(
        textwrap.dedent(f"""\
        services:
          main:
            volumes:
              - {bin_dir}:/root/.local/bin:ro
              - {where / "uv.toml"}:/root/.config/uv/uv.toml:ro
              - {python}:/opt/levelfield/python:ro
        """)
    )
    return overlay


def _memory_mb(task: Path) -> int:
    text = (task / "task.toml").read_text()
    if found := re.search(r"^memory_mb\s*=\s*(\d+)", text, re.M):
        return int(found.group(1))
    found = re.search(r'^memory\s*=\s*"(\d+)G"', text, re.M)
    return int(found.group(1)) * 1024 if found else 2048


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
