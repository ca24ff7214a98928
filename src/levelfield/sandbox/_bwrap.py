"""The bubblewrap command line for a trial's isolation.

The sandbox root is bubblewrap's own tmpfs, with the host's system directories bound read-only
into it one by one, rather than `--ro-bind / /`: on a read-only root, bubblewrap cannot create the
mount points a task expects (/app, /tests, /logs, /solution), and the host's /home, /root, /work
and /tmp — where datasets and run directories live — stay out of the agent's sight.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath

# Host directories the userland needs, bound read-only when present. /var carries dpkg state and
# /opt vendor tools; none of them hold harness data.
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/var", "/srv")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
HOSTNAME = "sandbox"
# bwrap reports the init's pid before its mounts are done; the init touches this file (on its
# private /run tmpfs) once they are, and the host waits for it under /proc/PID/root.
READY_FILE = "/run/levelfield-ready"


def system_binds() -> list[str]:
    args: list[str] = []
    for directory in SYSTEM_DIRS:
        if Path(directory).is_dir():
            args += ["--ro-bind", directory, directory]
    for link in MERGED_USR_LINKS:
        path = Path(link)
        if path.is_symlink():
            args += ["--symlink", str(path.readlink()), link]
        elif path.is_dir():
            args += ["--ro-bind", link, link]
    return args


def bwrap_argv(
    binds: Mapping[PurePosixPath, Path],
    *,
    workdir: PurePosixPath,
    allow_network: bool,
    info_fd: int,
    read_only: Mapping[PurePosixPath, Path] | None = None,
) -> list[str]:
    """bwrap starting an idle init; phases enter its namespaces later with nsenter."""
    argv = [
        "bwrap",
        "--die-with-parent",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        HOSTNAME,
        "--info-fd",
        str(info_fd),
    ]
    if not allow_network:
        argv.append("--unshare-net")
    argv += system_binds()
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"]
    for target, source in sorted(binds.items()):
        argv += ["--bind", str(source), str(target)]
    for target, source in sorted((read_only or {}).items()):
        argv += ["--ro-bind", str(source), str(target)]
    argv += ["--remount-ro", "/", "--chdir", str(workdir)]
    argv += ["/bin/sh", "-c", f": > {READY_FILE}; exec sleep infinity"]
    return argv


def nsenter_argv(init_pid: int) -> list[str]:
    """Enter every namespace of the init, at its root and its working directory (the task's
    workdir, set by bwrap's --chdir: nsenter would resolve an explicit --wd on the host).

    The environment is not on this command line: the caller passes it to the process, so that
    API keys never show in `ps` or /proc/PID/cmdline."""
    namespaces = ["-m", "-u", "-i", "-n", "-p", "-r", "-w"]
    return ["nsenter", "-t", str(init_pid), *namespaces]
