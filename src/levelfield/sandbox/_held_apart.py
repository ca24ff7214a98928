"""The agent's processes held in a cgroup of their own while the grader runs.

A task may leave a service for the grader to query, so nothing the agent left running is killed
before grading. But the grader joins the trial's cgroup, and what shares a cgroup shares its
ceilings: four busy loops left behind would take four fifths of its CPU and a CPU-bound test would
run past its time limit; a leftover holding most of the memory ceiling would get the tests
OOM-killed, one forking to the pids ceiling would leave them no fork. So, while test.sh runs,
every process in the trial's cgroup (the grader has not started yet: all are the agent's, or the
sandbox's idle init) moves into the child `levelfield-held`:

- CPU: the least weight the kernel takes and a quota of a tenth of the trial's CPU ceiling (a
  weight alone would not do: the grader's one busy thread uses one core, the held take the
  ceiling's rest on the other). The services still answer, on the CPU the grader leaves unused.
- memory and pids: the grader gets the whole ceiling of its own. The trial's ceilings double for
  the while, and the held child is bounded by what the agent had left of its own: its ceiling
  less its unreclaimable footprint (anonymous memory, tmpfs, kernel memory: the kernel charges a
  moved process's pages where they were, so only what they take anew is the child's), and the
  trial's pids ceiling (a moved process's count moves with it). Beyond that bound the kernel
  kills, or refuses the fork, among the held alone; what it did there is theirs (HeldTally).

The child's own counters, read by the kernel outside the agent's reach, say how much CPU they
took meanwhile; the grader's share is the trial's total less theirs. When grading ends the
ceilings are put back (on v2 only where the usage is below them: a lowered memory.max reclaims
by killing).

v1: the child exists in each of the cpu, cpuacct, memory and pids hierarchies. v2 ("no internal
processes"): a cgroup that hands controllers to children may hold no process itself, so the
grader, too, runs in a child (`levelfield-grader`), and both leave their children when grading
ends. Where the children cannot be made (a cgroup the harness cannot write), nothing is moved and
the reason is returned: the grader then shares the trial's budget as before, and its timeout is
weighed with the CPU the agent's processes took (verifier.py).
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
MIN_HELD_BYTES = 4 << 20  # a bound of nothing would kill the held at their first page
V1_UNLIMITED = 1 << 62  # memory.limit_in_bytes reads about 2**63 when unlimited
MOVE_ROUNDS = 20  # a process that forks while its parent moves leaves a child behind: again


class HoldFailed(OSError):
    """The child could not be made, or the processes not moved."""


@dataclass
class HeldApart:
    """Made from the trial cgroup's procs files (GraderView.cgroup_procs) and its tally. `joins`:
    the procs files the grader enters; `moved`: how many processes were held; after the hold,
    `agent_cpu_s` and `grader_cpu_s` as the kernel counted them, and what the kernel did to the
    held in `tally` (and `oom_kills`, `pids_max_hits`: this hold's)."""

    procs_files: Sequence[Path]
    tally: cgroups.HeldTally | None = None
    joins: list[Path] = field(default_factory=list)
    moved: int = 0
    agent_cpu_s: float = 0.0
    grader_cpu_s: float = 0.0
    oom_kills: int = 0
    pids_max_hits: int = 0
    notes: list[str] = field(default_factory=list)
    _made: list[Path] = field(default_factory=list)
    _raised: list[tuple[Path, str]] = field(default_factory=list)  # (file, its value before)
    _trial_cpu: Path | None = None
    _v2: bool = False
    _trial_start_s: float = 0.0
    _counted: bool = False

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
        for level in dirs:
            if level not in cpu and not _has_memory_or_pids(level):
                continue  # a hierarchy the hold does not bound
            held = _child(level, HELD, self._made)
            if (held / "cpu.shares").exists():
                (held / "cpu.shares").write_text(str(V1_LEAST_SHARES))
                quota = int(_read(level / "cpu.cfs_quota_us"))
                if quota > 0:
                    period = _read(level / "cpu.cfs_period_us")
                    (held / "cpu.cfs_period_us").write_text(period)
                    (held / "cpu.cfs_quota_us").write_text(str(_share(quota)))
            if (level / "memory.limit_in_bytes").exists():
                self._bound_memory_v1(level, held)
            if (level / "pids.max").exists():
                self._bound_pids(level, held)
            self.moved = max(self.moved, _move_all(level, held))

    def _bound_memory_v1(self, level: Path, held: Path) -> None:
        ceiling = int(_read(level / "memory.limit_in_bytes"))
        if ceiling >= V1_UNLIMITED:
            return
        (held / "memory.limit_in_bytes").write_text(str(_left(level, ceiling, v2=False)))
        memsw = level / "memory.memsw.limit_in_bytes"
        if memsw.exists() and int(_read(memsw)) < V1_UNLIMITED:
            self._raise(memsw, int(_read(memsw)) + ceiling)  # memsw may never be below memory
        self._raise(level / "memory.limit_in_bytes", 2 * ceiling)

    def _bound_pids(self, level: Path, held: Path) -> None:
        ceiling = _read(level / "pids.max")
        if ceiling == "max":
            return
        (held / "pids.max").write_text(ceiling)
        self._raise(level / "pids.max", 2 * int(ceiling))

    def _hold_v2(self, level: Path) -> None:
        self._v2, self._trial_cpu = True, level
        self._trial_start_s = self._used(level)
        held = _child(level, HELD, self._made)
        grader = _child(level, GRADER, self._made)
        self.moved = _move_all(level, held)
        given = [c for c in ("cpu", "memory", "pids") if c in _read(level / "cgroup.controllers")]
        for _ in range(MOVE_ROUNDS):
            try:
                (level / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in given))
                break
            except OSError:  # a fork after the move left a process in the trial: again
                self.moved += _move_all(level, held)
        else:
            raise OSError(0, "the trial's cgroup would not hand its controllers on")
        (held / "cpu.weight").write_text(str(V2_LEAST_WEIGHT))
        quota, period = _read(level / "cpu.max").split()
        if quota != "max":
            (held / "cpu.max").write_text(f"{_share(int(quota))} {period}")
        ceiling = _read(level / "memory.max") if "memory" in given else "max"
        if ceiling != "max":
            (held / "memory.max").write_text(str(_left(level, int(ceiling), v2=True)))
            self._raise(level / "memory.max", 2 * int(ceiling))
        if "pids" in given:
            self._bound_pids(level, held)
        self.joins = [grader / "cgroup.procs"]

    def _raise(self, path: Path, value: int) -> None:
        before = _read(path)
        path.write_text(str(value))
        self._raised.append((path, before))

    def release(self) -> None:
        """The kernel's counts read, every process back in the trial's cgroup, the children
        removed, the ceilings put back. Idempotent."""
        if self._trial_cpu is not None and self._made:
            held = self._trial_cpu / HELD
            self.agent_cpu_s = self._used(held)
            total = self._used(self._trial_cpu) - self._trial_start_s
            self.grader_cpu_s = max(0.0, total - self.agent_cpu_s)
        self._count_what_befell_the_held()
        if self._v2 and self._trial_cpu is not None:
            with contextlib.suppress(OSError):
                (self._trial_cpu / "cgroup.subtree_control").write_text("-cpu -memory -pids")
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
        self._put_ceilings_back()
        self.joins = list(self.procs_files)

    def _count_what_befell_the_held(self) -> None:
        if self._counted:
            return
        self._counted = True
        oom = pids = 0
        for child in self._made:
            if child.name != HELD:
                continue
            events = cgroups._keyed(child / ("memory.events" if self._v2 else "memory.oom_control"))
            oom += events.get("oom_kill", 0)
            pids += cgroups._keyed(child / "pids.events").get("max", 0)
        self.oom_kills += oom
        self.pids_max_hits += pids
        if self.tally is not None:
            self.tally.oom_kills += oom
            self.tally.pids_max_hits += pids
            self.tally.counted_in_trial |= self._v2

    def _put_ceilings_back(self) -> None:
        """In the reverse order of raising (v1's memsw may never be below memory). A ceiling
        the trial is now above stays raised, and is said: the agent's processes, back from
        their bounds, would meet it at once (a fork retried, a page touched), and a v2
        memory.max lowered below the usage reclaims by killing."""
        while self._raised:
            path, before = self._raised.pop()
            used = _usage_of(path)
            if used is not None and used > int(before):
                what = "pids" if path.name == "pids.max" else "memory"
                self.notes.append(
                    f"the trial's {what} ceiling stays raised after grading: the trial uses "
                    f"{used}, above its ceiling of {before}"
                )
                continue
            with contextlib.suppress(OSError):  # v1: a limit below the usage is refused (EBUSY)
                path.write_text(before)

    def _used(self, level: Path | None) -> float:
        return 0.0 if level is None else cgroups.cpu_usage_s(level, is_v2=self._v2)


def _read(path: Path) -> str:
    return path.read_text().strip()


def _usage_of(ceiling: Path) -> int | None:
    """What the trial uses of the ceiling in file `ceiling`; None where v1's kernel itself
    refuses a memory limit below the usage."""
    current = {"pids.max": "pids.current", "memory.max": "memory.current"}.get(ceiling.name)
    if current is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        return int(_read(ceiling.parent / current))
    return None


def _has_memory_or_pids(level: Path) -> bool:
    return (level / "memory.limit_in_bytes").exists() or (level / "pids.max").exists()


def _left(level: Path, ceiling: int, *, v2: bool) -> int:
    """What the agent has left of its memory ceiling: the ceiling less the trial's usage that
    reclaim cannot take (all but the page cache of files; v1 names the hierarchy's `total_`)."""
    usage_file, prefix = ("memory.current", "") if v2 else ("memory.usage_in_bytes", "total_")
    stat = cgroups._keyed(level / "memory.stat")
    cache = stat.get(f"{prefix}active_file", 0) + stat.get(f"{prefix}inactive_file", 0)
    footprint = max(0, int(_read(level / usage_file)) - cache)
    return max(MIN_HELD_BYTES, ceiling - footprint)


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
