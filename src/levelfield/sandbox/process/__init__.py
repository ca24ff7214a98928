"""The `process` backend: a trial cgroup for the limits, bubblewrap namespaces for isolation.

Start = a trial cgroup with the limits written, a workspace (capped disk), and an idle bwrap init
inside the cgroup; every phase enters the init's namespaces with nsenter, so background processes
an agent starts are still there for the verifier, as in a container. Teardown kills the cgroup's
processes, removes it and unmounts the disk; `reap` does the same for what a killed run left.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from levelfield.errors import HostUnsupported
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.sandbox import (
    BackendOptions,
    Enforcement,
    ReadOnlyMount,
    _bwrap,
    _netns,
    _seccomp,
    cgroups,
    disks,
    trial_roots,
)
from levelfield.sandbox.process import _workspace
from levelfield.sandbox.process._sandbox import ProcessSandbox
from levelfield.tasks import Task


class ProcessBackend:
    name: ClassVar[str] = "process"

    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        self._host: cgroups.CgroupHost | None = None

    @property
    def cgroups(self) -> cgroups.CgroupHost:
        if self._host is None:
            self._host = cgroups.detect()
        return self._host

    def hidden(self, task: Task) -> list[Path]:
        """What the agent must not read though it lies in a bound system directory: the host's
        root-only entries, the run directory, every folder of trials on this host (this run's
        and any other's, `trial_roots`) and the dataset."""
        private = _bwrap.host_private_entries()
        others = trial_roots.registered()
        return [*private, *others, self.options.run_dir.resolve(), task.path.resolve().parent]

    def check(self) -> list[str]:
        problems = [
            f"{tool} not found on PATH (Debian: apt-get install {pkg})"
            for tool, pkg in (
                ("bwrap", "bubblewrap"),
                ("nsenter", "util-linux"),
                ("setpriv", "util-linux"),
                ("mkfs.ext4", "e2fsprogs"),
            )
            if shutil.which(tool) is None
        ]
        if os.geteuid() != 0:
            problems.append("the process backend writes cgroups and mounts: run as root")
        problems += _seccomp.problems()
        try:
            _ = self.cgroups
        except HostUnsupported as exc:
            problems.append(str(exc))
        return problems

    def enforcement(self) -> Enforcement:
        v = self.cgroups.version
        return Enforcement(
            memory_ceiling="memory.limit_in_bytes" if v == 1 else "memory.max",
            memory_floor="memory.soft_limit_in_bytes" if v == 1 else "memory.low",
            cpu_ceiling="cpu.cfs_quota_us" if v == 1 else "cpu.max",
            cpu_floor="cpu.shares" if v == 1 else "cpu.weight",
            pids_ceiling="pids.max",
            storage_ceiling="loop-mounted ext4 of the ceiling's size",
            isolation=f"bubblewrap namespaces (pid, mount, ipc, uts, net, cgroup) on cgroup v{v}; "
            "a default container's capabilities less mknod, no-new-privileges, and its seccomp "
            "profile with a new session keyring on every exec",
        )

    def start(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
        secrets: Masker | None = None,
    ) -> ProcessSandbox:
        problems = self.check()
        if problems:
            raise HostUnsupported("; ".join(problems))
        cgroup = cgroups.TrialCgroup(self.cgroups, self.options.run_id, trial_id)
        workspace = network = None
        try:
            cgroup.create(limits)
            workspace = _workspace.create_workspace(
                trial_dir, task.workdir, limits.storage_ceiling_bytes
            )
            _seed_workdir(task, workspace.binds[task.workdir])
            if task.allow_internet:  # its own namespace, so that its byte counters are its own
                network = _netns.create(self.options.run_id, trial_id)
            return ProcessSandbox.launch(
                task,
                limits,
                cgroup,
                workspace,
                trial_dir,
                network=network,
                mounts=mounts,
                hidden=self.hidden(task),
                secrets=secrets or Masker(),
            )
        except BaseException:
            cgroup.kill_all()
            cgroup.remove()
            if network is not None:
                _netns.destroy(network)
            if workspace is not None:
                _workspace.destroy_workspace(workspace)
            raise

    def reap(self, run_id: str) -> int:
        """Processes, cgroups and mounted disks of `run_id`'s trials that a dead harness left."""
        removed = len({path.name for path in cgroups.reap(self.cgroups, run_id)})  # trials
        removed += _netns.reap(run_id)  # after the cgroups: no process holds a namespace then
        trials = (self.options.run_dir / "trials").resolve()
        for point in disks.mounts_under(trials):
            disks.unmount(Path(point))
            removed += 1
        return removed


def create(options: BackendOptions) -> ProcessBackend:
    return ProcessBackend(options)


def _seed_workdir(task: Task, workdir: Path) -> None:
    """The build context (environment/ minus the Dockerfile) is what the image would hold."""
    if not task.environment_dir.is_dir():
        return
    for entry in task.environment_dir.iterdir():
        if entry.name == "Dockerfile":
            continue
        target = workdir / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, target)
