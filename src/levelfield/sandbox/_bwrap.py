"""The bubblewrap command line for a trial's isolation, and the way each phase enters it.

The sandbox root is bubblewrap's own tmpfs, with the host's system directories bound read-only
into it one by one, rather than `--ro-bind / /`: on a read-only root, bubblewrap cannot create the
mount points a task expects (/app, /tests, /logs, /solution), and the host's /home, /root, /work
and /tmp — where datasets and run directories live — stay out of the agent's sight.

The agent is root in there, so what keeps it in is what root lacks: every phase enters with the
capabilities a default Docker container has, less CAP_MKNOD (Docker's device cgroup is what makes
that one harmless there; here nothing would), and no-new-privileges. Without CAP_SYS_ADMIN it
cannot mount, so cannot reach the host's disk or a writable cgroup tree: the trial's own cgroup
is shown read-only at /sys/fs/cgroup, as a container sees its own, in a cgroup namespace. Under
the bound system directories, the host's root-only entries (shadow, keys, engines' storage) and
the harness's own directories are hidden, since root inside would read them. The init is pid 1
of the sandbox, which a signal from inside cannot kill (`kill -9 -1` leaves it, and the
sandbox, standing), and reaps what is orphaned to it.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from levelfield.sandbox import DEFAULT_CAPABILITIES, trial_roots
from levelfield.sandbox._system_view import view_of

# Host directories the userland needs, bound read-only when present. /var carries dpkg state and
# /opt vendor tools; none of them hold harness data.
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/var", "/srv")
# Where mounts come and go while trials run (the engines' storage, runs' volumes): bound from a
# view without them (`_system_view`). /etc keeps its own, such as a bound /etc/resolv.conf.
CHURNING_DIRS = ("/var", "/srv")
MERGED_USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
HOSTNAME = "sandbox"
# bwrap reports the init's pid before its mounts are done; the init touches this file (on its
# private /run tmpfs) once they are, and the host waits for it under /proc/PID/root.
READY_FILE = "/run/levelfield-ready"
# pid 1 of the sandbox: sleeps, and reaps whatever is orphaned to it while it waits
INIT = f": > {READY_FILE}; while :; do sleep 3600 & wait; done"
CAPABILITIES = tuple(cap for cap in DEFAULT_CAPABILITIES if cap != "mknod")
CGROUP_VIEW = PurePosixPath("/sys/fs/cgroup")


def system_binds() -> list[str]:
    args: list[str] = []
    for directory in SYSTEM_DIRS:
        if Path(directory).is_dir():
            source = view_of(directory) if directory in CHURNING_DIRS else directory
            args += ["--ro-bind", source, directory]
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
    cgroup_dirs: Mapping[str, Path] | None = None,
    hidden: Iterable[Path] = (),
    seccomp_fd: int | None = None,
) -> list[str]:
    """bwrap starting an idle init; phases enter its namespaces later with nsenter. The init
    itself holds no capability at all, and runs under `seccomp_fd`'s filter when given."""
    argv = [
        "bwrap",
        "--die-with-parent",
        "--unshare-pid",
        "--as-pid-1",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--hostname",
        HOSTNAME,
        "--info-fd",
        str(info_fd),
    ]
    if seccomp_fd is not None:
        argv += ["--seccomp", str(seccomp_fd)]
    if not allow_network:
        argv.append("--unshare-net")
    argv += system_binds()
    argv += hiding(hidden, under_binds=binds)
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"]
    argv += cgroup_view(cgroup_dirs or {})
    for target, source in sorted(binds.items()):
        argv += ["--bind", str(source), str(target)]
    for target, source in sorted((read_only or {}).items()):
        argv += ["--ro-bind", str(source), str(target)]
    argv += ["--remount-ro", "/", "--chdir", str(workdir)]
    argv += ["/bin/sh", "-c", INIT]
    return argv


def cgroup_view(dirs: Mapping[str, Path]) -> list[str]:
    """The trial's own cgroup, read-only, where a container finds its own: one directory per
    controller on v1, the trial's directory itself on v2 ("unified")."""
    argv: list[str] = []
    for name, path in sorted(dirs.items()):
        target = CGROUP_VIEW if name == "unified" else CGROUP_VIEW / name
        argv += ["--ro-bind", str(path), str(target)]
    return argv


def hiding(paths: Iterable[Path], *, under_binds: Iterable[PurePosixPath] = ()) -> list[str]:
    """Cover each path inside a bound system directory: a directory by an empty tmpfs, a file by
    /dev/null (which the sandbox's nodev binds make unreadable). Paths under another hidden
    path, under the sandbox's own binds or outside the system directories need nothing."""
    covered: list[Path] = []
    argv: list[str] = []
    own = [Path(str(target)) for target in under_binds]
    for path in sorted({Path(p) for p in paths}, key=lambda p: len(p.parts)):
        inside = any(path.is_relative_to(d) for d in SYSTEM_DIRS)
        if not inside or any(path.is_relative_to(c) for c in (*covered, *own)):
            continue
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            argv += ["--tmpfs", str(path)]
        elif not stat.S_ISLNK(mode):
            argv += ["--ro-bind", "/dev/null", str(path)]
        covered.append(path)
    return argv


@functools.cache
def host_private_entries(roots: tuple[str, ...] = SYSTEM_DIRS[1:]) -> tuple[Path, ...]:
    """Entries of the host's system directories that only root may read (others have no read
    bit): /etc/shadow, private keys, the container engines' storage, a root-only key file. The
    agent is root in its sandbox, so these are hidden from it. /usr is left out: it holds
    programs, and walking it costs seconds. Walked once per process (~0.5 s on a busy host);
    an entry with nothing to read is left alone. A folder of trials (`trial_roots`) is covered
    whole, whatever its modes, and not walked."""
    found: list[Path] = []
    stack = [Path(root) for root in roots if Path(root).is_dir()]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        if any(entry.name == trial_roots.MARK for entry in entries):
            found.append(directory)
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                continue
            if stat.S_ISDIR(mode) and mode & 0o005 == 0o005:
                stack.append(Path(entry.path))
            elif (not mode & 0o004 or (stat.S_ISDIR(mode) and not mode & 0o001)) and _holds(entry):
                found.append(Path(entry.path))
    return tuple(found)


def _holds(entry: os.DirEntry[str]) -> bool:
    """Whether there is anything to read: a lock file or an empty directory costs a mount for
    nothing (each adds ~0.3 ms to a sandbox's start)."""
    try:
        if entry.is_dir(follow_symlinks=False):
            with os.scandir(entry.path) as inside:
                return any(True for _ in inside)
        return entry.stat(follow_symlinks=False).st_size > 0
    except OSError:
        return True


def nsenter_argv(init_pid: int) -> list[str]:
    """Enter every namespace of the init (its cgroup namespace too), at its root and its working
    directory (the task's workdir, set by bwrap's --chdir: nsenter would resolve an explicit
    --wd on the host), then drop to the sandbox's capabilities for good (setpriv, from the
    sandbox's read-only /usr): the bounding set, so that no exec gains one back, no inheritable
    or ambient capability, and no-new-privileges, so that no setuid or file capability does.

    The environment is not on this command line: the caller passes it to the process, so that
    API keys never show in `ps` or /proc/PID/cmdline."""
    namespaces = ["-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w"]
    keep = ",".join(f"+{cap}" for cap in CAPABILITIES)
    drop = [
        "setpriv",
        "--no-new-privs",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        f"--bounding-set=-all,{keep}",
        "--",
    ]
    return ["nsenter", "-t", str(init_pid), *namespaces, *drop]
