"""A started `process` trial: the bubblewrap init in the trial cgroup, entered by each phase with
nsenter (under the seccomp profile, `_seccomp.filtered_argv`), and read from the host.

Kept apart from the backend (`__init__.py`), which makes it, so that each reads as one concept.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from levelfield.errors import SandboxDied, SandboxStartError
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.records import Evidence, ImageRecord, PhaseResult
from levelfield.sandbox import (
    GraderView,
    Observables,
    ReadOnlyMount,
    Usage,
    _bwrap,
    _kernel_oom,
    _logcap,
    _netns,
    _output,
    _processes,
    _seccomp,
    bind_agent_logs,
    cgroups,
    disks,
    shell_start_up,
    trees,
)
from levelfield.sandbox.process import _workspace
from levelfield.tasks import Task

INIT_START_TIMEOUT_S = 10.0
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "TMPDIR": "/tmp",
}


class ProcessSandbox:
    """A started trial: the bwrap init in the trial cgroup, entered by each phase."""

    image: ImageRecord | None = None  # always None: the host's userland, no image

    def __init__(
        self,
        task: Task,
        limits: Limits,
        cgroup: cgroups.TrialCgroup,
        workspace: _workspace.Workspace,
        init: subprocess.Popen[bytes],
        init_pid: int,
        secrets: Masker,
        logs: _logcap.LogCaps,
    ) -> None:
        self.task, self.limits, self.cgroup, self.workspace = task, limits, cgroup, workspace
        self._init, self.init_pid = init, init_pid
        self.secrets = secrets  # masked in every log as it is written
        self.logs = logs  # each log capped, its cut noted in the evidence
        self._pumps: list[_output.LogPump] = []
        self._storage_full = False
        self._inodes_out: str | None = None  # the ceiling's disk ran out of inodes, said
        self._storage_peak = 0
        self._lock = threading.Lock()
        self._closed = False
        self.network: _netns.TrialNetwork | None = None
        self.hidden: tuple[Path, ...] = ()  # what the sandbox's views cover (the harness's own)
        self.kernel = _kernel_oom.KernelOomWatch()  # the host's OOM killer, from the start
        self.host_disk = disks.HostDiskWatch(None if workspace.image else workspace.root)

    @classmethod
    def launch(
        cls,
        task: Task,
        limits: Limits,
        cgroup: cgroups.TrialCgroup,
        workspace: _workspace.Workspace,
        trial_dir: Path,
        *,
        network: _netns.TrialNetwork | None = None,
        mounts: Sequence[ReadOnlyMount] = (),
        hidden: Sequence[Path] = (),
        secrets: Masker,
    ) -> ProcessSandbox:
        """The init's own output (anything in the sandbox may write to its pid 1's stdout) goes
        to sandbox.log through a masking pump, like every phase's."""
        read_fd, write_fd = os.pipe()
        seccomp_fd = _seccomp.open_filter()  # the init too: what is orphaned to it is filtered
        argv = _bwrap.bwrap_argv(
            workspace.binds,
            workdir=task.workdir,
            allow_network=network is not None,  # off unless the task asks for it
            info_fd=write_fd,
            read_only={m.target: m.source for m in mounts},
            cgroup_dirs=cgroup.dirs,
            hidden=hidden,
            seccomp_fd=seccomp_fd,
        )
        argv = [*network.enter_argv(), *argv] if network is not None else argv
        out_read, out_write = os.pipe()
        logs = _logcap.LogCaps()
        pump = _output.LogPump(out_read, trial_dir / "sandbox.log", secrets, logs)
        try:
            init = subprocess.Popen(
                _joined(cgroup, argv),
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd, seccomp_fd),
                env=BASE_ENV,  # not the harness's: its API keys would be in /proc/1/environ
            )
        finally:
            os.close(out_write)
            os.close(seccomp_fd)
        os.close(write_fd)
        try:
            init_pid = _read_child_pid(read_fd, init, trial_dir / "sandbox.log", pump)
        finally:
            os.close(read_fd)
        box = cls(task, limits, cgroup, workspace, init, init_pid, secrets, logs)
        box.network, box.hidden = network, tuple(hidden)
        box._pumps.append(pump)
        return box

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> PhaseResult:
        """Run `command` with bash in the sandbox; kill its process group at the timeout. It
        enters under the seccomp profile, with a session keyring of its own (_seccomp.py)."""
        if not self.is_alive():
            raise SandboxDied(f"sandbox init {self.init_pid} is gone")
        full_env = {**BASE_ENV, **(env or {})}
        entering = [*_bwrap.nsenter_argv(self.init_pid), "bash", "-c", command]
        argv = _seccomp.filtered_argv(_joined(self.cgroup, entering))
        started = time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = _output.log_size(log_path)
        read_fd, write_fd = os.pipe()
        pump = _output.LogPump(read_fd, log_path, self.secrets, self.logs)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=write_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=full_env,
            )
        finally:
            os.close(write_fd)
        timed_out = _output.wait_or_kill(proc, timeout_s)
        if not pump.drain():  # a background process still writes: its pump ends with it
            self._pumps.append(pump)
        code = proc.returncode
        return PhaseResult(
            exit_code=None if timed_out else _output.shell_exit_code(code),
            signal=_output.signal_of_returncode(code) if not timed_out else None,
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            output_tail=_output.tail(log_path, offset=offset),
        )

    def grader_view(self, scratch: Path) -> GraderView:
        """The agent's work state as the grader sees it: the host's userland read-only, with the
        same entries hidden, and the workspace's binds but its /logs, of which only the agent's
        own log folders come along (each opened without following a link the agent made)."""
        logs = PurePosixPath("/logs")
        binds = {t: s for t, s in self.workspace.binds.items() if t != logs}
        root = [
            *_bwrap.system_binds(),
            *_bwrap.hiding(self.hidden, under_binds=binds),
            *["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"],
            *_bwrap.cgroup_view(self.cgroup.dirs),
        ]
        for target, source in sorted(binds.items()):
            root += ["--bind", str(source), str(target)]
        fds: list[int] = []
        notes = tuple(bind_agent_logs(self.workspace.binds[logs], root, fds))
        env = {k: v for k, v in BASE_ENV.items() if k not in ("HOME", "TMPDIR")}
        leftovers = _processes.left_running(
            self.cgroup.pids(), net_pid=self.init_pid, init=self.init_pid
        )
        return GraderView(
            root=root,
            network=Path(f"/proc/{self.init_pid}/ns/net"),
            processes=Path(f"/proc/{self.init_pid}/ns/pid"),
            cgroup_procs=self.cgroup.procs_files(),
            held=self.cgroup.held,
            env=env,
            workdir=self.task.workdir,
            capabilities=_bwrap.CAPABILITIES,
            fds=fds,
            leftovers=leftovers,
            notes=notes,
            home_files=shell_start_up(_skeleton),
        )

    def copy_in(self, src: Path, dest: PurePosixPath) -> None:
        """Never writes through a link the agent made (it would land on the host)."""
        trees.copy_in(src, *self.workspace.split(dest))

    def read_file(self, path: PurePosixPath) -> bytes | None:
        found = self.read_entry(path, max_bytes=trees.READ_MAX_BYTES)
        return found.data if found.kind == "file" else None

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry:
        """Read on the host, so never through a link: the host's file is not the sandbox's."""
        try:
            return trees.read_entry(*self.workspace.split(path), max_bytes=max_bytes)
        except SandboxStartError:
            return trees.Entry("missing")

    def digests(self, path: PurePosixPath) -> dict[str, str]:
        return trees.digests(*self.workspace.split(path))

    def renew_dir(self, path: PurePosixPath, *, keep_in: Path) -> tuple[str, ...]:
        return trees.renew_dir(*self.workspace.split(path), keep_in)

    def usage(self) -> Usage:
        reading = self.cgroup.usage()
        free_used = self.workspace.free_and_used()
        free, used = free_used if free_used else (None, None)
        self.host_disk.read()
        with self._lock:
            if free is not None and self.workspace.is_full(free):
                self._storage_full = True
                self._inodes_out = self._inodes_out or self.workspace.inodes_out()
            self._storage_peak = max(self._storage_peak, used or 0)
        return Usage(reading.memory_bytes, reading.cpu_usage_s, used, free)

    def is_alive(self) -> bool:
        return self._init.poll() is None

    def evidence(self) -> Evidence:
        usage = self.usage()
        counters = self.cgroup.counters()
        kills = self.kernel.kills(_trial_marker(self.cgroup))
        return Evidence(
            oom_kills=counters.oom_kills,
            memory_failcnt=counters.memory_failcnt,
            memory_peak_bytes=counters.memory_peak_bytes,
            pids_max_hits=counters.pids_max_hits,
            cpu_nr_periods=counters.cpu_nr_periods,
            cpu_throttled_periods=counters.cpu_throttled_periods,
            cpu_throttled_s=counters.cpu_throttled_s,
            cpu_usage_s=counters.cpu_usage_s,
            storage_used_bytes=self._storage_peak if usage.storage_used_bytes is not None else None,
            storage_ceiling_bytes=self.limits.storage_ceiling_bytes,
            storage_full=self._storage_full,
            storage_written_bytes=_written(self.workspace.image),
            host_disk_free_min_bytes=self.host_disk.least_free_bytes,
            host_disk_full=self.host_disk.full,
            sandbox_alive=self.is_alive(),
            host_oom_kills=kills.host_oom_kills,
            outside_oom_kills=len(kills.outside),
            held_oom_kills=counters.held_oom_kills,
            held_pids_max_hits=counters.held_pids_max_hits,
            notes=(*kills.notes(), *self.logs.notes(), *filter(None, [self._inodes_out])),
        )

    def network_namespace(self) -> Path | None:
        """The init's namespace: the trial's own, joined to the host by a veth pair when the
        task has network (_netns.py), else holding only loopback."""
        return Path(f"/proc/{self.init_pid}/ns/net")

    def reaches_outside(self) -> bool:
        return self.network is not None

    def collect_logs(self, dest: Path) -> tuple[str, ...]:
        """Links stay links, FIFOs, sockets and devices stay behind: returns what was not copied."""
        source = self.workspace.binds[PurePosixPath("/logs")]
        try:
            fd = trees.open_dir(source, trees.HERE)
        except OSError:
            return ()
        try:
            return trees.copy_tree(fd, dest).listed()
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.cgroup.kill_all()
        with contextlib.suppress(ProcessLookupError):
            self._init.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._init.wait(timeout=5)
        for pump in self._pumps:  # their writers are dead: the pipes are at their end
            pump.close()
        self.cgroup.remove()
        self.kernel.close()
        if self.network is not None:
            _netns.destroy(self.network)
        _workspace.destroy_workspace(self.workspace)

    def observables(self) -> Observables:
        """No network, nothing to meter: the trial's namespace then holds only loopback."""
        pressure = self.cgroup.dirs["unified"] if self.cgroup.is_v2 else None
        network_pid = self.init_pid if self.network is not None else None
        return Observables(network_pid=network_pid, pressure_dir=pressure)


def _written(image: Path | None) -> int | None:
    return disks.written_bytes(image) if image is not None else None


def _trial_marker(cgroup: cgroups.TrialCgroup) -> str:
    """How the kernel log names the trial's cgroup: its path ends /levelfield/RUN/TRIAL."""
    return "/" + "/".join(cgroup.dirs["unified" if cgroup.is_v2 else "memory"].parts[-3:])


def _joined(cgroup: cgroups.TrialCgroup, argv: list[str]) -> list[str]:
    return cgroups.joined(cgroup.procs_files(), argv)


def _read_child_pid(
    read_fd: int, init: subprocess.Popen[bytes], log: Path, pump: _output.LogPump
) -> int:
    """bwrap writes {"child-pid": N} once the namespaces are set up; EOF first means it failed."""
    chunks: list[bytes] = []
    deadline = time.monotonic() + INIT_START_TIMEOUT_S
    os.set_blocking(read_fd, False)
    while time.monotonic() < deadline:
        try:
            chunk = os.read(read_fd, 4096)
        except BlockingIOError:
            if init.poll() is not None:
                break
            time.sleep(0.005)
            continue
        if not chunk:
            break
        chunks.append(chunk)
        with contextlib.suppress(json.JSONDecodeError):
            pid = int(json.loads(b"".join(chunks))["child-pid"])
            return _wait_ready(pid, init, deadline, (log, pump))
    raise SandboxStartError(f"bubblewrap did not start: {_last_words(init, log, pump)}")


def _wait_ready(
    pid: int,
    init: subprocess.Popen[bytes],
    deadline: float,
    output: tuple[Path, _output.LogPump],
) -> int:
    ready = Path(f"/proc/{pid}/root{_bwrap.READY_FILE}")
    while time.monotonic() < deadline and init.poll() is None:
        if ready.exists():
            return pid
        time.sleep(0.002)
    said = _last_words(init, *output)
    raise SandboxStartError(f"bubblewrap's init did not become ready: {said}")


def _last_words(init: subprocess.Popen[bytes], log: Path, pump: _output.LogPump) -> str:
    """Kill the init that failed to start, and read what it said once its pump has written it."""
    init.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        init.wait(timeout=5)
    pump.close()
    detail = log.read_text(errors="replace").strip()[-500:] if log.exists() else ""
    return detail or "no output"


SKELETON = Path("/etc/skel")  # the host userland's own HOME start-up files


def _skeleton(name: str) -> bytes | None:
    with contextlib.suppress(OSError):
        return (SKELETON / name).read_bytes()
    return None
