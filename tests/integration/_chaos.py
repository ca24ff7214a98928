"""Faults on purpose, for the chaos tests: a harness process to kill, an agent shell to kill,
a run directory to fill, a container engine's API service to restart; then the figures of what
was proven (trials planned and stored, duplicates, leaks)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from levelfield.sandbox.cgroups import PREFIX, detect

from ._helpers import leftovers, stored_count

WAIT_S = 180.0  # the longest any one wait may take on a busy 2-core host before the test fails


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


def run_id_of(out: Path) -> str | None:
    try:
        with sqlite3.connect(out / "run.db") as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()
    except sqlite3.Error:
        return None
    return json.loads(row[0]) if row else None


def stored_keys(out: Path) -> Counter[str]:
    with sqlite3.connect(out / "run.db") as conn:
        return Counter(k for (k,) in conn.execute("SELECT trial_key FROM trials"))


def integrity(out: Path) -> str:
    with sqlite3.connect(out / "run.db") as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


@dataclass
class Harness:
    """`levelfield run` as a user starts it, one process per invocation."""

    command: list[str]
    out: Path
    logs: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    proc: subprocess.Popen[bytes] | None = None
    started: int = 0

    def start(self) -> None:
        self.started += 1
        self.log = self.logs / f"harness-{self.started}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, env=self.env
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def signal(self, signum: int) -> int:
        """Send `signum` and wait for the harness to end; its exit code."""
        assert self.proc is not None
        self.proc.send_signal(signum)
        return self.wait()

    def wait(self, timeout_s: float = WAIT_S) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout=timeout_s)
        self.proc = None
        return code

    def progress(self, rng: random.Random, at_most: int = 3) -> bool:
        """Wait until 1..at_most more trials are stored (seeded), then a seeded pause; False
        when the run ended first."""
        target = stored_count(self.out) + rng.randint(1, at_most)
        wait_for(lambda: stored_count(self.out) >= target or not self.running, "progress")
        time.sleep(rng.uniform(0.0, 0.6))
        return self.running


def trial_cgroups(run_id: str) -> dict[str, list[int]]:
    """Trials of the process backend in flight: trial key → pids in its cgroup."""
    base = next(iter(detect().bases.values())) / PREFIX / run_id
    found: dict[str, list[int]] = {}
    with contextlib.suppress(OSError):
        for trial in base.iterdir():
            with contextlib.suppress(OSError):
                pids = [int(p) for p in (trial / "cgroup.procs").read_text().split()]
                if pids:
                    found[trial.name] = pids
    return found


AGENT_SHELL = [b"bash", b"/solution/solve.sh"]  # the oracle's shell, as bash execs `bash -c`


def kill_agent_shell(
    rng: random.Random, in_flight: Callable[[], dict[str, list[int]]]
) -> str | None:
    """SIGKILL, from outside, the agent's shell of a seeded random trial in flight while it
    waits for its `sleep`: the solution then never touches /app/done, so the trial's verdict is
    known (failed/tests_failed, no OOM kill explaining the SIGKILL). Its trial key."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        shells = {key: pid for key, pids in in_flight().items() if (pid := _sleeping(pids))}
        if shells:
            key = rng.choice(sorted(shells))
            try:
                os.kill(shells[key], signal.SIGKILL)
            except ProcessLookupError:
                continue
            return key
        time.sleep(0.02)
    return None


def _sleeping(pids: list[int]) -> int | None:
    """The agent shell among `pids` whose child is `sleep` (it is blocked until that ends)."""
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:2] != AGENT_SHELL:
                continue
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if any(Path(f"/proc/{c}/comm").read_text().strip() == "sleep" for c in children):
                return pid
    return None


def stored_verdict(out: Path, key: str) -> tuple[str, str, list[str]]:
    """Outcome, reason and evidence notes of a stored trial."""
    with sqlite3.connect(out / "run.db") as conn:
        (raw,) = conn.execute("SELECT record FROM trials WHERE trial_key = ?", (key,)).fetchone()
    record = json.loads(raw)
    return record["outcome"], record["reason"], list(record["evidence"]["notes"])


def assert_killed_from_outside(out: Path, key: str) -> None:
    """The verdict of a trial whose agent shell was SIGKILLed from outside: the reward's
    (failed/tests_failed), with the kill said to be unexplained, never a silent failure."""
    outcome, reason, notes = stored_verdict(out, key)
    assert (outcome, reason) == ("failed", "tests_failed"), (outcome, reason, notes)
    assert any("the agent phase ended by SIGKILL" in n and "unexplained" in n for n in notes), notes


def fill(mount: Path) -> Path:
    """Write until the filesystem says ENOSPC: the run directory's disk is full."""
    filler = mount / "filler"
    chunk = b"\0" * (1 << 20)
    with open(filler, "wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def loop_devices_under(path: Path) -> list[str]:
    listed = subprocess.run(
        ["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True
    ).stdout
    return [line.strip() for line in listed.splitlines() if str(path.resolve()) in line]


@dataclass
class Figures:
    """What a chaos run proves, printed for the reader of the test's output."""

    backend: str
    faults: Counter[str]
    planned: set[str]
    stored: Counter[str]
    integrity: str
    leaks: list[str]
    reaped: list[dict[str, object]]
    outcomes: Counter[str]

    @property
    def lost(self) -> set[str]:
        return self.planned - set(self.stored)

    @property
    def duplicated(self) -> dict[str, int]:
        return {k: n for k, n in self.stored.items() if n > 1}

    @property
    def unplanned(self) -> set[str]:
        return set(self.stored) - self.planned

    def show(self) -> str:
        faults = ", ".join(f"{kind} {n}" for kind, n in sorted(self.faults.items()))
        outcomes = ", ".join(f"{k} {n}" for k, n in sorted(self.outcomes.items()))
        return (
            f"\n== chaos on the {self.backend} backend ==\n"
            f"faults injected: {faults}\n"
            f"trials planned {len(self.planned)}, stored {sum(self.stored.values())} "
            f"({outcomes})\n"
            f"lost {len(self.lost)}, duplicated {len(self.duplicated)}, "
            f"unplanned {len(self.unplanned)}\n"
            f"store integrity_check: {self.integrity}\n"
            f"leaks (cgroups, mounts, loop devices, processes, containers): {len(self.leaks)}"
            f"{' ' + str(self.leaks) if self.leaks else ''}\n"
            f"reaped by the run itself on resume/end: {self.reaped}\n"
        )


def figures(
    backend: str, faults: Counter[str], out: Path, planned: set[str], extra_leaks: list[str]
) -> Figures:
    run_id = run_id_of(out)
    assert run_id is not None
    with sqlite3.connect(out / "run.db") as conn:
        outcomes = Counter(o for (o,) in conn.execute("SELECT outcome FROM trials"))
        row = conn.execute("SELECT value FROM meta WHERE key = 'reaped'").fetchone()
    leaks = leftovers(run_id, out) + loop_devices_under(out) + extra_leaks
    return Figures(
        backend,
        faults,
        planned,
        stored_keys(out),
        integrity(out),
        leaks,
        json.loads(row[0]) if row else [],
        outcomes,
    )
