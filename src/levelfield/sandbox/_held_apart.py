"""The agent's processes held in a cgroup of their own while the grader runs.

A task may leave a service for the grader to query, so nothing the agent left running is killed
before grading. But the grader joins the trial's cgroup, and what shares a cgroup shares its CPU
ceiling: four busy loops left behind would take four fifths of it, and a CPU-bound test would
run past its time limit. So, while test.sh runs, every process in the trial's cgroup (the
grader has not started yet: all are the agent's, or the sandbox's idle init) moves into the
child `levelfield-held`, whose CPU weight is the least the kernel takes and whose quota is a
tenth of the trial's CPU ceiling (a weight alone would not do: the grader's one busy thread uses
one core, the held take the ceiling's rest on the other). The services still answer, on the CPU
the grader leaves unused, within that tenth. The child's own counters, read by the kernel outside
the agent's reach, say how much CPU they took meanwhile; the grader's share is the trial's total
less theirs.

v1: the child exists in the cpu and cpuacct hierarchies only (memory and pids stay the
trial's, where every other reader finds the processes). v2 ("no internal processes"): a cgroup
that hands the cpu controller to children may hold no process itself, so the grader, too, runs in
a child (`levelfield-grader`), and both leave their children when grading ends. Where the
children cannot be made (a cgroup the harness cannot write), nothing is moved and the reason is
returned: the grader then shares the CPU as before, and its timeout is weighed with the CPU the
agent's processes took (verifier.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from levelfield.sandbox import cgroups

HELD = "levelfield-held"
GRADER = "levelfield-grader"  # v2 only
V1_LEAST_SHARES = 2  # the kernel's minimum cpu.shares
V2_LEAST_WEIGHT = 1  # the minimum cpu.weight
HELD_SHARE = 0.1  # of the trial's CPU ceiling, the most the held may take of it
MIN_QUOTA_US = 1000  # the kernel's least CFS quota
MOVE_ROUNDS = 20  # a process that forks while its parent moves leaves a child behind: again


class HoldFailed(OSError):
    """The child could not be made, or the processes not moved."""


@dataclass
class HeldApart:
    """Made from the trial cgroup's procs files (GraderView.cgroup_procs). `joins`: the procs
    files the grader enters; `moved`: how many processes were held; after the hold,
    `agent_cpu_s` and `grader_cpu_s` as the kernel counted them."""

    procs_files: Sequence[Path]
    joins: list[Path] = field(default_factory=list)
    moved: int = 0
    agent_cpu_s: float = 0.0
    grader_cpu_s: float = 0.0
    _made: list[Path] = field(default_factory=list)
    _trial_cpu: Path | None = None
    _v2: bool = False
    _trial_start_s: float = 0.0

    def hold(self) -> None:
        """Make the children and move the processes; on failure everything is put back and
        HoldFailed raised, with the grader joining the trial's cgroup as before."""
        dirs = [p.parent for p in self.procs_files]
        self.joins = list(self.procs_files)
        try:
            if len(dirs) == 1 and (dirs[0] / "cgroup.controllers").exists():
                self._hold_v2(dirs[0])
            else:
                self._hold_v1(dirs)
        except OSError as exc:
            self.release()
            why = f"the agent's processes were not held apart from the grader: {exc}"
            raise HoldFailed(exc.errno, why) from exc

    def _hold_v1(self, dirs: list[Path]) -> None:
        cpu = [d for d in dirs if (d / "cpu.shares").exists() or (d / "cpuacct.usage").exists()]
        if not cpu:
            raise OSError(0, "no cpu hierarchy in the trial's cgroup")
        self._trial_cpu = next((d for d in cpu if (d / "cpuacct.usage").exists()), None)
        self._trial_start_s = self._used(self._trial_cpu)
        for level in cpu:
            held = _child(level, HELD, self._made)
            if (held / "cpu.shares").exists():
                (held / "cpu.shares").write_text(str(V1_LEAST_SHARES))
                quota = int(_read(level / "cpu.cfs_quota_us"))
                if quota > 0:
                    period = _read(level / "cpu.cfs_period_us")
                    (held / "cpu.cfs_period_us").write_text(period)
                    (held / "cpu.cfs_quota_us").write_text(str(_share(quota)))
            self.moved = max(self.moved, _move_all(level, held))

    def _hold_v2(self, level: Path) -> None:
        self._v2, self._trial_cpu = True, level
        self._trial_start_s = self._used(level)
        held = _child(level, HELD, self._made)
        grader = _child(level, GRADER, self._made)
        self.moved = _move_all(level, held)
        for _ in range(MOVE_ROUNDS):
            try:
                (level / "cgroup.subtree_control").write_text("+cpu")
                break
            except OSError:  # a fork after the move left a process in the trial: again
                self.moved += _move_all(level, held)
        else:
            raise OSError(0, "the trial's cgroup would not hand the cpu controller on")
        (held / "cpu.weight").write_text(str(V2_LEAST_WEIGHT))
        quota, period = _read(level / "cpu.max").split()
        if quota != "max":
            (held / "cpu.max").write_text(f"{_share(int(quota))} {period}")
        self.joins = [grader / "cgroup.procs"]

    def release(self) -> None:
        """The kernel's counts read, every process back in the trial's cgroup, the children
        removed. Idempotent."""
        if self._trial_cpu is not None and self._made:
            held = self._trial_cpu / HELD
            self.agent_cpu_s = self._used(held)
            total = self._used(self._trial_cpu) - self._trial_start_s
            self.grader_cpu_s = max(0.0, total - self.agent_cpu_s)
        if self._v2 and self._trial_cpu is not None:
            with contextlib.suppress(OSError):
                (self._trial_cpu / "cgroup.subtree_control").write_text("-cpu")
        for child in reversed(self._made):
            for _ in range(MOVE_ROUNDS):
                with contextlib.suppress(OSError):
                    _move_all(child, child.parent)
                try:
                    child.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    continue  # a process forked while moving: move it too
        self._made = [c for c in self._made if c.exists()]
        self._trial_cpu = None if not self._made else self._trial_cpu
        self.joins = list(self.procs_files)

    def _used(self, level: Path | None) -> float:
        return 0.0 if level is None else cgroups.cpu_usage_s(level, is_v2=self._v2)


def _read(path: Path) -> str:
    return path.read_text().strip()


def _share(quota_us: int) -> int:
    return max(MIN_QUOTA_US, int(quota_us * HELD_SHARE))


def _child(level: Path, name: str, made: list[Path]) -> Path:
    child = level / name
    with contextlib.suppress(FileExistsError):  # a crashed harness's: reused, then removed
        child.mkdir()
    made.append(child)
    return child


def _move_all(source: Path, dest: Path) -> int:
    """Every process of `source` (itself, not below) into `dest`, until none is left; a process
    that has exited meanwhile is not an error."""
    moved = 0
    for _ in range(MOVE_ROUNDS):
        pids = (source / "cgroup.procs").read_text().split()
        if not pids:
            return moved
        for pid in pids:
            try:
                (dest / "cgroup.procs").write_text(pid)
                moved += 1
            except ProcessLookupError:
                continue
            except OSError:
                if not Path(f"/proc/{pid}").exists():
                    continue
                raise
    if (source / "cgroup.procs").read_text().split():
        raise OSError(0, f"processes of {source} kept forking while they moved")
    return moved
