"""Host health around a trial: pressure stall information and CPU steal, read before and after.

PSI (`/proc/pressure/{cpu,memory,io}`, Linux ≥ 4.20) says how much of the time runnable work
waited for a CPU, for memory reclaim or for I/O: a busy host shows it even when the trial's own
counters look normal. A cgroup v2 trial has the same three files for itself (`cpu.pressure`...);
cgroup v1 has none. Steal is the time the hypervisor ran someone else while this guest wanted the
CPU (the 8th number of the `cpu` line of /proc/stat, in USER_HZ ticks). Every reader tolerates a
missing file: a kernel without PSI records nothing rather than failing the trial.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from levelfield.records import Health, PressureUse

PRESSURE_DIR = Path("/proc/pressure")
PROC_STAT = Path("/proc/stat")
RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True, slots=True)
class PressureLine:
    avg10: float
    total_us: int


@dataclass(frozen=True, slots=True)
class Pressure:
    some: PressureLine
    full: PressureLine | None = None


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """Counters at one instant; two of them make a `Health` record."""

    at: float
    host: dict[str, Pressure] = field(default_factory=dict)
    cgroup: dict[str, Pressure] = field(default_factory=dict)
    cpu_ticks: tuple[int, int] | None = None  # (steal, total)


def parse_pressure(text: str) -> Pressure | None:
    """`some avg10=1.00 avg60=... total=N` and, for memory and io (cpu too on ≥ 5.13), `full`."""
    lines: dict[str, PressureLine] = {}
    for line in text.splitlines():
        kind, *pairs = line.split()
        values = dict(p.split("=", 1) for p in pairs if "=" in p)
        with contextlib.suppress(KeyError, ValueError):
            lines[kind] = PressureLine(float(values["avg10"]), int(values["total"]))
    if "some" not in lines:
        return None
    return Pressure(lines["some"], lines.get("full"))


def parse_cpu_ticks(text: str) -> tuple[int, int] | None:
    """(steal, total) of the aggregate `cpu` line; guest time is already inside user time."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            ticks = [int(x) for x in line.split()[1:]]
            steal = ticks[7] if len(ticks) > 7 else 0
            return steal, sum(ticks[:8])
    return None


def read_pressures(files: dict[str, Path]) -> dict[str, Pressure]:
    out = {}
    for resource, path in files.items():
        with contextlib.suppress(OSError):
            parsed = parse_pressure(path.read_text())
            if parsed is not None:
                out[resource] = parsed
    return out


def snapshot(pressure_dir: Path | None = None) -> HealthSnapshot:
    """Now. `pressure_dir` is the trial's cgroup v2 directory, if it has one."""
    host = read_pressures({r: PRESSURE_DIR / r for r in RESOURCES})
    cgroup = (
        read_pressures({r: pressure_dir / f"{r}.pressure" for r in RESOURCES})
        if pressure_dir is not None
        else {}
    )
    ticks = None
    with contextlib.suppress(OSError):
        ticks = parse_cpu_ticks(PROC_STAT.read_text())
    return HealthSnapshot(time.monotonic(), host, cgroup, ticks)


def health_between(
    start: HealthSnapshot, end: HealthSnapshot, *, admission_wait_s: float | None = None
) -> Health:
    """What the host went through between two snapshots."""
    return Health(
        host_pressure=_uses(start.host, end.host, end.at - start.at),
        cgroup_pressure=_uses(start.cgroup, end.cgroup, end.at - start.at),
        steal_share=steal_share(start.cpu_ticks, end.cpu_ticks),
        admission_wait_s=None if admission_wait_s is None else round(admission_wait_s, 4),
    )


def steal_share(start: tuple[int, int] | None, end: tuple[int, int] | None) -> float | None:
    if start is None or end is None or end[1] <= start[1]:
        return None
    return round((end[0] - start[0]) / (end[1] - start[1]), 6)


def _uses(
    start: dict[str, Pressure], end: dict[str, Pressure], over_s: float
) -> dict[str, PressureUse]:
    out = {}
    for resource, after in end.items():
        before = start.get(resource)
        if before is None:
            continue
        full_stall = None
        if after.full is not None and before.full is not None:
            full_stall = round(max(0, after.full.total_us - before.full.total_us) / 1e6, 6)
        out[resource] = PressureUse(
            some_avg10=after.some.avg10,
            some_stall_s=round(max(0, after.some.total_us - before.some.total_us) / 1e6, 6),
            full_avg10=after.full.avg10 if after.full is not None else None,
            full_stall_s=full_stall,
            over_s=round(over_s, 4),
        )
    return out
