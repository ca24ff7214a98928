"""The host kernel's own record of OOM kills: /proc/vmstat's `oom_kill` and the kernel log.

A trial's cgroup is charged every OOM kill of its processes, whoever's limit caused it: the victim's
memory cgroup counts the kill even when a parent cgroup's limit, or the whole host running out,
chose it (measured on v1: a child with no limit of its own under a 150 MiB parent reads
`oom_kill 1`, the parent 0; v2's memory.events counts the same way). Only the kernel log says
whose limit it was. Each kill logs one line,
    oom-kill:constraint=CONSTRAINT_MEMCG,...,oom_memcg=/a/b,task_memcg=/a/b/c,task=python3,pid=42,...
where `oom_memcg` is the cgroup whose limit was hit (`global_oom` when the host ran out) and
`task_memcg` the victim's. /proc/vmstat's `oom_kill` counts every kill on the host, memory-cgroup
kills included, so it says that the OOM killer acted, not whom it killed.

The log is read through /dev/kmsg: a descriptor opened when the trial starts and moved to the end
of the log reads exactly the records written since, without parsing timestamps. It needs
CAP_SYSLOG (root here; not in an unprivileged container), and a log that wraps faster than it is
read loses records: both are said in the evidence.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from levelfield.sandbox._held_apart import HELD

VMSTAT = Path("/proc/vmstat")
KMSG = Path("/dev/kmsg")
READ_BYTES = 8192  # one record per read(); the kernel caps a record well below this
OOM_LINE = re.compile(r"oom-kill:(?P<fields>\S+)")
OVERRAN = "the kernel log overran while the trial ran: some of its records were lost"


@dataclass(frozen=True, slots=True)
class OomKill:
    """One kill the kernel logged: the victim and the cgroup whose limit was hit."""

    task: str
    pid: int
    victim_cgroup: str
    limit_cgroup: str | None  # None: the host itself ran out of memory (global_oom)
    line: str

    def describe(self) -> str:
        limit = f"the limit of {self.limit_cgroup}" if self.limit_cgroup else "the host's memory"
        return f"{self.task} (pid {self.pid}) in {self.victim_cgroup}, at {limit}"


def parse_oom_kill(message: str) -> OomKill | None:
    """The fields of an `oom-kill:` line (Linux 4.19 and later), None for any other line."""
    found = OOM_LINE.search(message)
    if found is None:
        return None
    fields: dict[str, str] = {}
    for part in found["fields"].split(","):
        key, _, value = part.partition("=")
        fields[key] = value
    if "task_memcg" not in fields or not fields.get("pid", "").isdigit():
        return None
    return OomKill(
        task=fields.get("task", "?"),
        pid=int(fields["pid"]),
        victim_cgroup=fields["task_memcg"],
        limit_cgroup=None if "global_oom" in fields else fields.get("oom_memcg"),
        line=message.strip(),
    )


def host_oom_kills() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in VMSTAT.read_text().splitlines():
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    return None


@dataclass(frozen=True, slots=True)
class TrialKills:
    """What the kernel did while one trial ran, as far as this host can tell."""

    host_oom_kills: int | None  # kills anywhere on the host (vmstat); None when not read
    own: tuple[OomKill, ...] = ()  # the trial's processes, at its own ceiling
    outside: tuple[OomKill, ...] = ()  # the trial's processes, at the host's or a parent's limit
    problems: tuple[str, ...] = ()  # why the kernel log could not say everything
    held: tuple[OomKill, ...] = ()  # the agent's, held apart from the grader (HeldTally)

    def notes(self) -> tuple[str, ...]:
        said = [
            f"the kernel's OOM killer killed {kill.describe()}, a limit that is not the "
            f"trial's own ceiling: the host ran short (kernel log: {kill.line[:300]})"
            for kill in self.outside
        ]
        said += [
            f"the kernel's OOM killer killed {kill.describe()}: a process the agent left, held "
            "apart from the grader within what the agent had left of its ceiling (theirs, not "
            "the grader's)"
            for kill in self.held
        ]
        acted = self.host_oom_kills != 0  # the problems matter only if the OOM killer acted
        return (*said, *(self.problems if acted else ()))


@dataclass
class KernelOomWatch:
    """Opened when a trial's sandbox starts; `kills(marker)` reads what happened since. `marker`
    picks the trial's cgroups out of the log: a path suffix (process) or a container ID (oci)."""

    vmstat_start: int | None = field(default_factory=host_oom_kills)
    _log: io.FileIO | None = None
    _kills: list[OomKill] = field(default_factory=list)
    _problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        try:
            self._log = io.FileIO(KMSG, "r")  # a file object: closed even if nobody closes it
            os.set_blocking(self._log.fileno(), False)
            self._log.seek(0, os.SEEK_END)
        except OSError as exc:
            self.close()
            self._problems.append(
                f"kernel log not readable here ({exc.strerror}): an OOM kill outside the "
                "trial's own ceiling cannot be attributed"
            )

    def kills(self, marker: str, *, count_host: bool = True) -> TrialKills:
        self._read_new()
        now, start = (host_oom_kills() if count_host else None), self.vmstat_start
        delta = now - start if now is not None and start is not None else None
        mine = [k for k in self._kills if _names(k.victim_cgroup, marker)]
        held = tuple(k for k in mine if k.victim_cgroup.endswith(f"/{HELD}"))
        mine = [k for k in mine if k not in held]
        own = tuple(k for k in mine if k.limit_cgroup and _names(k.limit_cgroup, marker))
        outside = tuple(k for k in mine if k not in own)
        return TrialKills(delta, own, outside, tuple(self._problems), held)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _read_new(self) -> None:
        while self._log is not None:
            try:
                record = self._log.read(READ_BYTES)  # one record per read; None: nothing new
            except BrokenPipeError:  # the log wrapped past records not yet read: go on
                if OVERRAN not in self._problems:
                    self._problems.append(OVERRAN)
                continue
            except OSError:
                return
            if not record:
                return
            kill = parse_oom_kill(record.decode(errors="replace").partition(";")[2])
            if kill is not None:
                self._kills.append(kill)


def _names(cgroup: str, marker: str) -> bool:
    """Whether a cgroup path is the trial's or below it: the marker ends a path component (a
    process trial's `/levelfield/RUN/TRIAL`) or is part of one (a container ID)."""
    if marker.startswith("/"):
        return cgroup.endswith(marker) or f"{marker}/" in cgroup
    return marker in cgroup
