"""One cgroup per trial, on cgroup v1 or v2: limits in, kernel counters out.

v1 (hybrid hosts): one directory per controller (memory, cpu, cpuacct, pids), nested under the
harness's own cgroup of that controller as /proc/self/cgroup names it — a process may only
create children beneath its own memory cgroup. v2 (most users' machines): one directory with
memory.max / cpu.max / pids.max, under the harness's own cgroup, which must have the controllers
delegated. Trial cgroups live at `<own>/levelfield/<run_id>/<trial_id>` so that a resumed run can
find and reap exactly its own leftovers, and never another live run's.

On v2 a cgroup that holds processes cannot enable controllers for its children ("no internal
processes"), and the harness always sits in its own cgroup: a systemd scope started with
`systemd-run --scope -p Delegate=yes`, a login session, a container's root. So the processes of
`<own>` move into the leaf `<own>/levelfield-harness` first, as container engines do with their
init; a later levelfield started from there finds `<own>` again, never nesting deeper.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from levelfield.errors import HostUnsupported, SandboxStartError
from levelfield.policy import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "levelfield"
HARNESS_LEAF = "levelfield-harness"  # v2: where the processes of the harness's own cgroup go
V2_CONTROLLERS = ("memory", "cpu", "pids")
V1_CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
CFS_PERIOD_US = 100_000  # the kernel's default period; Docker and Kubernetes use it too
# The engines' own parents of their containers (cgroupfs and systemd drivers).
ENGINE_PARENTS = frozenset({"libpod_parent", "docker", "machine.slice"})
CPU_SHARES_PER_CPU = 1024  # Docker's --cpu-shares for one CPU; Kubernetes' request → shares
KILL_WAIT_S = 5.0
MOVE_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class Usage:
    memory_bytes: int
    cpu_usage_s: float


@dataclass(frozen=True, slots=True)
class Counters:
    """Raw counters of one trial cgroup; each backend turns them into Evidence."""

    oom_kills: int = 0
    memory_failcnt: int = 0
    memory_peak_bytes: int | None = None
    pids_max_hits: int = 0
    cpu_nr_periods: int = 0
    cpu_throttled_periods: int = 0
    cpu_throttled_s: float = 0.0
    cpu_usage_s: float | None = None
    held_oom_kills: int = 0  # of the agent's processes held apart while the grader ran
    held_pids_max_hits: int = 0


@dataclass(slots=True)
class HeldTally:
    """What the kernel did to the agent's processes while they were held apart from the grader
    (sandbox/_held_apart.py), over every hold of a trial: an OOM kill at the bound they were held
    within, a fork refused at theirs. Theirs, not the grader's: the trial's counters leave them
    out (v1 counts a kill on the victim's cgroup and a refused fork on the limit's; a v2 parent
    counts its children's, so they are taken off)."""

    oom_kills: int = 0
    pids_max_hits: int = 0
    counted_in_trial: bool = False  # v2

    def apart(self, counters: Counters) -> Counters:
        if not (self.oom_kills or self.pids_max_hits):
            return counters
        oom, pids = (self.oom_kills, self.pids_max_hits) if self.counted_in_trial else (0, 0)
        return replace(
            counters,
            oom_kills=max(0, counters.oom_kills - oom),
            pids_max_hits=max(0, counters.pids_max_hits - pids),
            held_oom_kills=self.oom_kills,
            held_pids_max_hits=self.pids_max_hits,
        )


@dataclass(frozen=True, slots=True)
class CgroupHost:
    """Where this host keeps cgroups and where the harness itself sits in them."""

    version: int
    bases: dict[str, Path] = field(default_factory=dict)  # controller (v1) or "unified" (v2)

    def describe(self) -> str:
        if self.version == 1:
            return (
                "cgroup v1: memory.limit_in_bytes, cpu.cfs_quota_us, pids.max; "
                "floors by memory.soft_limit_in_bytes and cpu.shares"
            )
        return "cgroup v2: memory.max, cpu.max, pids.max; floors by memory.low and cpu.weight"


def _read(path: Path) -> str:
    return path.read_text().strip()


def _keyed(path: Path) -> dict[str, int]:
    """'key value' lines (memory.events, cpu.stat, pids.events, memory.oom_control)."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("-").isdigit():
                out[parts[0]] = int(parts[1])
    return out


def _own_paths(proc_cgroup: str) -> dict[str, str]:
    """/proc/self/cgroup → {controller: path}; the v2 entry is keyed ''."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(","):
            out[name] = path
    return out


def _v1_mounts(proc_mounts: str) -> dict[str, Path]:
    """Controller → its v1 mount point, from /proc/mounts options ("rw,relatime,cpu,cpuacct")."""
    out: dict[str, Path] = {}
    for line in proc_mounts.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "cgroup":
            for option in parts[3].split(","):
                if option in V1_CONTROLLERS:
                    out[option] = Path(parts[1])
    return out


def detect(proc_cgroup: str | None = None, proc_mounts: str | None = None) -> CgroupHost:
    """v2 when the unified hierarchy holds the controllers, else v1 (hybrid hosts are v1)."""
    proc_cgroup = proc_cgroup if proc_cgroup is not None else Path("/proc/self/cgroup").read_text()
    proc_mounts = proc_mounts if proc_mounts is not None else Path("/proc/mounts").read_text()
    own = _own_paths(proc_cgroup)
    controllers_file = CGROUP_ROOT / "cgroup.controllers"
    if controllers_file.exists() and "memory" in controllers_file.read_text().split():
        base = CGROUP_ROOT / own.get("", "/").lstrip("/")
        return CgroupHost(2, {"unified": base.parent if base.name == HARNESS_LEAF else base})
    mounts = _v1_mounts(proc_mounts)
    missing = [c for c in V1_CONTROLLERS if c not in mounts]
    if missing:
        raise HostUnsupported(
            f"no cgroup controller for {', '.join(missing)}: mount cgroup v1 controllers or use "
            "a cgroup v2 host with memory, cpu and pids delegated"
        )
    bases = {c: mounts[c] / own.get(c, "/").lstrip("/") for c in V1_CONTROLLERS}
    return CgroupHost(1, bases)


class TrialCgroup:
    """The cgroup(s) of one trial. Create, limit, join (via `procs_files`), read, kill, remove."""

    def __init__(self, host: CgroupHost, run_id: str, trial_id: str) -> None:
        self.host = host
        self.dirs = {name: base / PREFIX / run_id / trial_id for name, base in host.bases.items()}
        self.held = HeldTally()

    @classmethod
    def at(cls, host: CgroupHost, dirs: dict[str, Path]) -> TrialCgroup:
        """Readers over directories someone else created (a container engine's cgroup)."""
        cgroup = cls(host, "-", "-")
        cgroup.dirs = dirs
        return cgroup

    @property
    def is_v2(self) -> bool:
        return self.host.version == 2

    def _dir(self, controller: str) -> Path:
        return self.dirs["unified"] if self.is_v2 else self.dirs[controller]

    def create(self, limits: Limits) -> None:
        try:
            if self.is_v2:
                enable_v2_controllers(self.dirs["unified"])
            for path in self.dirs.values():
                path.mkdir(parents=True, exist_ok=True)
            self._apply(limits)
        except PermissionError as exc:
            raise HostUnsupported(f"cannot write cgroup {exc.filename}: run as root") from exc
        except OSError as exc:
            raise SandboxStartError(f"cgroup setup failed at {exc.filename}: {exc}") from exc

    def _weigh_parents(self) -> None:
        """CPU floors are shares among siblings; the levelfield/ and run/ levels above the trials
        compete with everything else on the host. With the default weight (one CPU's worth) a
        few busy host processes would leave all trials together a fraction of a core, so those
        levels weigh as much as the whole host's CPUs: the trials' floors hold under load.

        On v2 a memory.low protects a cgroup only as far as every ancestor's does, so those two
        levels pass down ("max") whatever protection the harness's own cgroup has."""
        cpu = self._dir("cpu")
        for level in (cpu.parent, cpu.parent.parent):
            weigh_as_host(level, is_v2=self.is_v2)

    def weigh_engine_parent(self) -> Path | None:
        """A container engine puts its containers under a parent of its own (libpod_parent/,
        docker/, machine.slice/) that weighs one CPU against every host process: a container's
        CPU floor, its shares among that parent's children, then held only while the host was
        idle (a TB2 task that signals a subprocess 0.5 s after starting Python failed on a
        loaded host). That parent weighs as the host's CPUs, as the process backend's levels do.
        Any other parent (a systemd slice shared with services) is left as it is: None."""
        parent = self._dir("cpu").parent
        if parent.name not in ENGINE_PARENTS:
            return None
        weigh_as_host(parent, is_v2=self.is_v2)
        return parent

    def _apply(self, limits: Limits) -> None:
        self._weigh_parents()
        shares = max(2, int(limits.cpu_floor * CPU_SHARES_PER_CPU))
        quota = int(limits.cpu_ceiling * CFS_PERIOD_US) if limits.cpu_ceiling else None
        if self.is_v2:
            d = self.dirs["unified"]
            _write(d / "memory.max", limits.memory_ceiling_bytes or "max")
            _write(d / "memory.swap.max", 0, optional=True)
            _write(d / "memory.low", limits.memory_floor_bytes)
            _write(d / "cpu.max", f"{quota or 'max'} {CFS_PERIOD_US}")
            _write(d / "cpu.weight", 1 + (shares - 2) * 9999 // 262142)  # runc's shares→weight
            _write(d / "pids.max", limits.pids_max or "max")
            return
        mem, cpu, pids = self.dirs["memory"], self.dirs["cpu"], self.dirs["pids"]
        _write(mem / "memory.limit_in_bytes", limits.memory_ceiling_bytes or -1)
        _write(mem / "memory.soft_limit_in_bytes", limits.memory_floor_bytes)
        _write(mem / "memory.swappiness", 0, optional=True)
        _write(cpu / "cpu.shares", shares)
        _write(cpu / "cpu.cfs_period_us", CFS_PERIOD_US)
        _write(cpu / "cpu.cfs_quota_us", quota or -1)
        _write(pids / "pids.max", limits.pids_max or "max")

    def procs_files(self) -> list[Path]:
        """Files a process writes its pid to, to enter the trial (one per v1 hierarchy)."""
        unique = {str(p): p for p in self.dirs.values()}.values()
        return [p / "cgroup.procs" for p in unique]

    def pids(self) -> list[int]:
        with contextlib.suppress(OSError):
            return [int(x) for x in (self._dir("memory") / "cgroup.procs").read_text().split()]
        return []

    def usage(self) -> Usage:
        if self.is_v2:
            mem = _int_or(self.dirs["unified"] / "memory.current", 0)
        else:
            mem = _int_or(self.dirs["memory"] / "memory.usage_in_bytes", 0)
        return Usage(mem, cpu_usage_s(self._dir("cpuacct"), is_v2=self.is_v2))

    def counters(self) -> Counters:
        """The trial's counters, with what the kernel did to the agent's held processes apart."""
        return self.held.apart(self._counters())

    def _counters(self) -> Counters:
        if self.is_v2:
            return _v2_counters(self.dirs["unified"])
        mem, cpu = self.dirs["memory"], self.dirs["cpu"]
        stat = _keyed(cpu / "cpu.stat")
        return Counters(
            oom_kills=_keyed(mem / "memory.oom_control").get("oom_kill", 0),
            memory_failcnt=_int_or(mem / "memory.failcnt", 0),
            memory_peak_bytes=_int_or(mem / "memory.max_usage_in_bytes", None),
            pids_max_hits=_keyed(self.dirs["pids"] / "pids.events").get("max", 0),
            cpu_nr_periods=stat.get("nr_periods", 0),
            cpu_throttled_periods=stat.get("nr_throttled", 0),
            cpu_throttled_s=stat.get("throttled_time", 0) / 1e9,
            cpu_usage_s=cpu_usage_s(self.dirs["cpuacct"], is_v2=False),
        )

    def kill_all(self) -> None:
        kill_cgroup_processes(self._dir("memory"))

    def remove(self) -> None:
        for path in self.dirs.values():
            remove_tree(path)


def _v2_counters(d: Path) -> Counters:
    events, stat = _keyed(d / "memory.events"), _keyed(d / "cpu.stat")
    return Counters(
        oom_kills=events.get("oom_kill", 0),
        memory_failcnt=events.get("max", 0),
        memory_peak_bytes=_int_or(d / "memory.peak", None),
        pids_max_hits=_keyed(d / "pids.events").get("max", 0),
        cpu_nr_periods=stat.get("nr_periods", 0),
        cpu_throttled_periods=stat.get("nr_throttled", 0),
        cpu_throttled_s=stat.get("throttled_usec", 0) / 1e6,
        cpu_usage_s=cpu_usage_s(d, is_v2=True),
    )


def cpu_usage_s(level: Path, *, is_v2: bool) -> float:
    """CPU seconds the kernel charged to the cgroup `level` and below; 0 when unreadable."""
    if is_v2:
        return _keyed(level / "cpu.stat").get("usage_usec", 0) / 1e6
    return (_int_or(level / "cpuacct.usage", 0) or 0) / 1e9


def enable_v2_controllers(trial_dir: Path) -> None:
    """Delegate memory, cpu and pids down from the harness's cgroup to the trial's parent."""
    own = trial_dir.parents[2]
    _enable_v2_at(own, _move_processes_into_leaf)
    for level in (own / PREFIX, trial_dir.parent):
        level.mkdir(exist_ok=True)
        _enable_v2_at(level, None)


def _enable_v2_at(level: Path, make_room: Callable[[Path], None] | None) -> None:
    enabled = _read(level / "cgroup.subtree_control").split()
    if all(c in enabled for c in V2_CONTROLLERS):
        return
    missing = [c for c in V2_CONTROLLERS if c not in _read(level / "cgroup.controllers").split()]
    if missing:
        raise HostUnsupported(
            f"cgroup v2: {level} has no {', '.join(missing)} controller; start levelfield in a "
            "cgroup that has them delegated: systemd-run --scope -p Delegate=yes levelfield …"
        )
    for _ in range(MOVE_ATTEMPTS):
        try:
            (level / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in V2_CONTROLLERS))
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or make_room is None:
                raise HostUnsupported(
                    f"cgroup v2: cannot delegate controllers below {level} ({exc.strerror})"
                ) from exc
            make_room(level)  # a process forked meanwhile is moved on the next attempt
    raise HostUnsupported(f"cgroup v2: processes keep appearing in {level}; cannot delegate")


def _move_processes_into_leaf(own: Path) -> None:
    """v2 forbids controllers below a cgroup with processes of its own: move them one down."""
    leaf = own / HARNESS_LEAF
    leaf.mkdir(exist_ok=True)
    for pid in _read(own / "cgroup.procs").split():
        with contextlib.suppress(ProcessLookupError):  # exited meanwhile
            (leaf / "cgroup.procs").write_text(pid)


def unprotected_ancestor(own: Path, proc_mounts: str | None = None) -> Path | None:
    """v2: the cgroup above `own` whose memory.low of 0 voids the trials' memory.low floors.

    The kernel caps a cgroup's protection at its parent's; a child of the root keeps its own.
    With the mount option memory_recursiveprot (systemd's default) a level without a memory.low
    of its own still passes its parent's protection down, so only the top level must set one."""
    proc_mounts = proc_mounts if proc_mounts is not None else Path("/proc/mounts").read_text()
    recursive = any(
        line.split()[2] == "cgroup2" and "memory_recursiveprot" in line.split()[3]
        for line in proc_mounts.splitlines()
        if len(line.split()) >= 4
    )
    chain = [own, *own.parents]
    levels = [p for p in chain if CGROUP_ROOT in p.parents][::-1]  # top level first
    for depth, level in enumerate(levels):
        if _read_or(level / "memory.low") == "0" and (depth == 0 or not recursive):
            return level
    return None


def _read_or(path: Path, default: str = "") -> str:
    try:
        return _read(path)
    except OSError:
        return default


def weigh_as_host(level: Path, *, is_v2: bool) -> None:
    """`level` weighs as much as the whole host's CPUs among its siblings (see _weigh_parents)."""
    cpus = os.cpu_count() or 1
    if is_v2:
        _write(level / "cpu.weight", min(10000, 100 * cpus), optional=True)
        _write(level / "memory.low", "max", optional=True)
    else:
        _write(level / "cpu.shares", CPU_SHARES_PER_CPU * cpus, optional=True)


def _write(path: Path, value: object, *, optional: bool = False) -> None:
    try:
        path.write_text(str(value))
    except OSError:
        if not optional:
            raise


def _int_or(path: Path, default: int | None) -> int | None:
    try:
        return int(_read(path))
    except (OSError, ValueError):
        return default


# `sh` moves itself into every hierarchy of the cgroup, then becomes the real command, so that
# no fork happens outside the limits (and no preexec_fn runs in a threaded parent).
_JOIN = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


def joined(procs_files: Iterable[Path], argv: Sequence[str]) -> list[str]:
    """`argv`, started inside the cgroup whose procs files are given (one per v1 hierarchy)."""
    return ["/bin/sh", "-c", _JOIN, "sh", *map(str, procs_files), "--", *argv]


def kill_cgroup_processes(directory: Path) -> None:
    """SIGKILL everything in the cgroup (and below) until it is empty; v2 has cgroup.kill for it."""
    if (directory / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            (directory / "cgroup.kill").write_text("1")
    deadline, pause = time.monotonic() + KILL_WAIT_S, 0.001
    while time.monotonic() < deadline:
        pids = list(_pids_below(directory))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(pause)  # exits take a moment to show in cgroup.procs; a fork bomb, longer
        pause = min(pause * 2, 0.05)


def _pids_below(directory: Path) -> Iterator[int]:
    if not directory.is_dir():
        return
    for procs in directory.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            yield from (int(x) for x in procs.read_text().split())


def remove_tree(directory: Path) -> None:
    """rmdir depth-first; a cgroup can take a moment to become removable after its last exit.
    Another harness may be removing the same tree (two Harbor processes reaping one dead run)."""
    try:
        children = sorted(
            (p for p in directory.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)
        )
    except FileNotFoundError:
        children = []
    if not directory.is_dir():
        return
    for path in [*children, directory]:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.02)


def reap(host: CgroupHost, run_id: str | None = None) -> list[Path]:
    """Kill and remove trial cgroups a dead run left: one run's, or (None) every run's.
    Returns the trial cgroups found (one per hierarchy), not the run's own empty parent."""
    removed: list[Path] = []
    for base in host.bases.values():
        root = base / PREFIX
        targets = [root / run_id] if run_id else ([root] if root.is_dir() else [])
        for target in targets:
            try:
                kill_cgroup_processes(target)
                removed += [p for p in target.iterdir() if p.is_dir()]
            except FileNotFoundError:  # gone: another harness reaped the same dead run
                continue
            remove_tree(target)
    return removed
