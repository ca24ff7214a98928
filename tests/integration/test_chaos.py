"""Faults on purpose, at seeded random moments, during real sweeps; then the proof that nothing
was lost: every planned trial stored exactly once, the store whole (`PRAGMA integrity_check`), and
no cgroup, mount, loop device, process or container of the run left behind.

Process backend (60 trials): `kill -9` of the harness three times, each followed by a resume;
SIGKILL, from outside, of a random trial's agent shell (a recorded trial, not a lost one: its
verdict is asserted, failed/tests_failed with the kill said to be unexplained); the run
directory's disk filled (a small loop-mounted filesystem as --out: the run stops with a clear
error and a whole store, then space is freed and the run resumed); SIGTERM; Ctrl-C (SIGINT).
OCI backend (12 trials): the engine's API service restarted mid-trial (a podman system service
of this test's own, on its own socket, so that no other user of the machine's engine notices),
SIGKILL of an agent shell inside a container (its verdict asserted the same way), and `kill -9`
of the harness. The figures are printed.

About 1.5 min (process) and 1.5 min (oci) on a 2-core machine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import MakeTask, require
from ._chaos import (
    Figures,
    Harness,
    assert_killed_from_outside,
    figures,
    fill,
    integrity,
    kill_agent_shell,
    run_id_of,
    stored_keys,
    trial_cgroups,
    wait_for,
)
from ._helpers import stored_count

pytestmark = [pytest.mark.slow, pytest.mark.sandbox]

SEED = int(os.environ.get("LEVELFIELD_CHAOS_SEED", "13"))
SOLVE = "sleep 0.4; touch /app/done"
OUT_DISK_MB = 48


def _command(dataset: Path, out: Path, backend: str, repeats: int) -> list[str]:
    return [
        sys.executable, "-m", "levelfield", "run", str(dataset), "--out", str(out),
        "--backend", backend, "--policy", "strict", "--policy", "uncapped",
        "--repeats", str(repeats), "--concurrency", "2", "--seed", str(SEED),
    ]  # fmt: skip


def _planned(out: Path) -> set[str]:
    with sqlite3.connect(out / "run.db") as conn:
        rows = conn.execute("SELECT trial_keys FROM plans").fetchall()
    return {key for (keys,) in rows for key in json.loads(keys)}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB ext4 filesystem, loop-mounted: the run directory's disk, small enough to fill."""
    image, mount = tmp_path / "out-disk.img", tmp_path / "out-disk"
    mount.mkdir()
    with open(image, "wb") as fh:
        fh.truncate(OUT_DISK_MB << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", str(image)], check=True)
    subprocess.run(["mount", "-o", "loop", str(image), str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _finish(harness: Harness) -> None:
    """The last resume: the same command until the run says it is complete."""
    if harness.running:
        assert harness.wait() == 0, harness.output()[-3000:]
    harness.start()
    code = harness.wait()
    assert code == 0, harness.output()[-3000:]


def _assert_proven(result: Figures, kinds: set[str], planned: int) -> None:
    print(result.show())
    assert set(result.faults) >= kinds, f"not injected: {kinds - set(result.faults)}"
    assert len(result.planned) == planned
    assert result.lost == set() and result.duplicated == {} and result.unplanned == set()
    assert result.integrity == "ok"
    assert result.leaks == []


def test_process_sweep_survives_kills_a_full_disk_and_interrupts(
    make_task: MakeTask, small_disk: Path, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    for name in ("a", "b", "c", "d", "e"):
        root = make_task(name, solve=SOLVE, storage_mb=16)
    out = small_disk / "run"
    harness = Harness(_command(root.parent, out, "process", repeats=6), out, tmp_path)
    schedule = ["kill -9"] * 3 + ["sandbox SIGKILL", "disk full", "SIGTERM", "Ctrl-C"]
    rng.shuffle(schedule)
    faults: Counter[str] = Counter()
    victims: list[str] = []
    for fault in schedule:
        if not harness.running:
            harness.start()
        if not harness.progress(rng):
            break  # the run completed first: the figures show the fault as missing
        run_id = run_id_of(out)
        assert run_id is not None
        if fault == "sandbox SIGKILL":
            victim = kill_agent_shell(rng, lambda: trial_cgroups(run_id))  # noqa: B023
            assert victim is not None, "no trial in flight to kill a process of"
            victims.append(victim)
            wait_for(lambda: victim in stored_keys(out), f"a record of {victim}")  # noqa: B023
            assert_killed_from_outside(out, victim)
        elif fault == "kill -9":
            assert harness.signal(signal.SIGKILL) == -signal.SIGKILL
        elif fault in ("SIGTERM", "Ctrl-C"):
            code = harness.signal(signal.SIGTERM if fault == "SIGTERM" else signal.SIGINT)
            assert code == 130 and "run the same command to resume" in harness.output()
        else:
            _fill_and_free(harness, small_disk, out)
        faults[fault] += 1
    _finish(harness)
    result = figures("process", faults, out, _planned(out), [])
    print(f"agent shells killed in trials {victims}: each stored once, as "
          f"{[_reason(out, v) for v in victims]}")  # fmt: skip
    _assert_proven(result, set(schedule), planned=60)


def _fill_and_free(harness: Harness, disk: Path, out: Path) -> None:
    """The run must stop by itself with a clear error and a whole store; then room, resume."""
    stored = stored_count(out)
    filler = fill(disk)
    code = harness.wait()
    text = harness.output()
    assert code == 1, text[-3000:]
    assert "is full" in text and "run the same command to resume" in text, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert integrity(out) == "ok"
    assert stored_count(out) >= stored  # nothing committed was lost
    filler.unlink()


def _reason(out: Path, key: str) -> str:
    with sqlite3.connect(out / "run.db") as conn:
        (reason,) = conn.execute("SELECT reason FROM trials WHERE trial_key = ?", (key,)).fetchone()
    return str(reason)


# ---- oci -----------------------------------------------------------------------------------------


class EngineService:
    """A podman system service of this test's own: restarting it disturbs no other user of the
    machine's engine (the same containers storage, its own socket)."""

    def __init__(self, directory: Path) -> None:
        self.socket = directory / "podman.sock"
        self.url = f"unix://{self.socket}"
        self.log = directory / "podman-service.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                ["podman", "system", "service", "--time=0", self.url],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        wait_for(self._answers, "the podman API service", timeout_s=60)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def _answers(self) -> bool:
        ping = ["curl", "-fsS", "--max-time", "2", "--unix-socket", str(self.socket), "d/_ping"]
        done = subprocess.run(ping, capture_output=True)
        return done.returncode == 0


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[EngineService]:
    missing = [tool for tool in ("podman", "curl") if shutil.which(tool) is None]
    require(missing, "the oci chaos test")
    service = EngineService(tmp_path)
    service.start()
    try:
        yield service
    finally:
        service.stop()


def _containers(run_id: str, *, running: bool = False) -> list[str]:
    argv = ["podman", "ps", "-q", "--filter", f"label=levelfield.run={run_id}"]
    listed = subprocess.run(argv + ([] if running else ["-a"]), capture_output=True, text=True)
    return listed.stdout.split()


def _container_processes(run_id: str) -> dict[str, list[int]]:
    """Running containers of the run → the host pids in each container's pids cgroup, keyed by
    the trial each runs."""
    found: dict[str, list[int]] = {}
    for cid in _containers(run_id, running=True):
        fields = '{{.State.Pid}} {{index .Config.Labels "levelfield.trial"}}'
        inspect = ["podman", "inspect", "-f", fields, cid]
        said = subprocess.run(inspect, capture_output=True, text=True).stdout
        pid, _, trial = said.partition(" ")
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
            path = next(ln.split(":", 2)[2] for ln in lines if ln.split(":")[1] == "pids")
            procs = Path(f"/sys/fs/cgroup/pids{path}/cgroup.procs").read_text().split()
        except (OSError, StopIteration, IndexError):
            continue
        if procs:
            found[trial.strip()] = [int(p) for p in procs]
    return found


@pytest.mark.oci
def test_oci_sweep_survives_an_engine_restart_and_kills(
    make_task: MakeTask, engine: EngineService, tmp_path: Path
) -> None:
    from .test_oci import _engine_problems

    require(_engine_problems(), "an OCI engine")
    rng = random.Random(SEED)
    for name in ("a", "b", "c"):
        root = make_task(name, solve="sleep 1; touch /app/done", storage_mb=16)
    out = tmp_path / "run"
    harness = Harness(_command(root.parent, out, "oci", repeats=2), out, tmp_path)
    harness.env["DOCKER_HOST"] = engine.url
    schedule = ["engine restart", "sandbox SIGKILL", "kill -9"]
    rng.shuffle(schedule)
    faults: Counter[str] = Counter()
    for fault in schedule:
        if not harness.running:
            harness.start()
        if not harness.progress(rng, at_most=2):
            break
        run_id = run_id_of(out)
        assert run_id is not None
        if fault == "engine restart":
            wait_for(lambda: bool(_containers(run_id, running=True)), "a trial's container")  # noqa: B023
            time.sleep(rng.uniform(0.0, 0.8))
            engine.restart()
        elif fault == "sandbox SIGKILL":
            victim = kill_agent_shell(rng, lambda: _container_processes(run_id))  # noqa: B023
            assert victim is not None, "no container in flight to kill a process of"
            wait_for(lambda: victim in stored_keys(out), f"a record of {victim}")  # noqa: B023
            assert_killed_from_outside(out, victim)
        else:
            assert harness.signal(signal.SIGKILL) == -signal.SIGKILL
        faults[fault] += 1
    _finish(harness)
    run_id = run_id_of(out)
    assert run_id is not None
    left = [f"container {c}" for c in _containers(run_id)]
    result = figures("oci", faults, out, _planned(out), left)
    _assert_proven(result, set(schedule), planned=12)
