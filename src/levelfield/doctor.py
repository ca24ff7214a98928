"""What this host can enforce: each mechanism tried for real, not guessed from files.

Each check creates and removes what it tests (a cgroup, a bubblewrap namespace, a loop-mounted
disk), so a green line means the process backend will work, not merely that a file exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from levelfield.errors import HostUnsupported
from levelfield.sandbox import _cgroup


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    needed_by: str = "process"


def run_checks() -> list[Check]:
    return [_root(), *_cgroups(), _bwrap(), _loop_disk(), *_engines()]


def _root() -> Check:
    is_root = os.geteuid() == 0
    return Check("root", is_root, "running as root" if is_root else "cgroups and mounts need root")


def _cgroups() -> list[Check]:
    try:
        host = _cgroup.detect()
    except HostUnsupported as exc:
        return [Check("cgroups", False, str(exc))]
    checks = [Check("cgroup version", True, host.describe())]
    probe = _cgroup.TrialCgroup(host, "doctor", uuid.uuid4().hex[:8])
    for name, path in probe.dirs.items():
        checks.append(_cgroup_writable(name, path, delegate=host.version == 2))
    for base in host.bases.values():
        _cgroup.remove_tree(base / _cgroup.PREFIX / "doctor")
    if host.version == 2:
        checks.append(_memory_floor(host.bases["unified"]))
    return checks


def _cgroup_writable(name: str, path: Path, *, delegate: bool) -> Check:
    """On v2 the controllers must also be enabled down to the trial, as a trial's start does."""
    try:
        if delegate:
            _cgroup.enable_v2_controllers(path)
        path.mkdir(parents=True, exist_ok=True)
    except HostUnsupported as exc:
        return Check(f"cgroup {name}", False, str(exc))
    except OSError as exc:
        return Check(f"cgroup {name}", False, f"cannot create {path}: {exc.strerror}")
    done = "memory, cpu and pids delegated" if delegate else "writable"
    return Check(f"cgroup {name}", True, f"{done} under {path.parents[2]}")


def _memory_floor(own: Path) -> Check:
    """Floors are best effort, so a void memory.low is said, not failed."""
    gap = _cgroup.unprotected_ancestor(own)
    if gap is None:
        return Check("memory floor", True, f"memory.low protects trials as far as {own} is")
    return Check(
        "memory floor",
        True,
        f"memory.low floors have no effect: {gap} has memory.low 0 (systemd: MemoryLow= on it)",
    )


def _bwrap() -> Check:
    if shutil.which("bwrap") is None:
        return Check("bubblewrap", False, "not installed (Debian: apt-get install bubblewrap)")
    version = _output(["bwrap", "--version"])
    done = subprocess.run(
        [
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--unshare-net",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "true",
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return Check(
            "bubblewrap", False, f"{version}: cannot create namespaces: {done.stderr.strip()}"
        )
    return Check("bubblewrap", True, f"{version}: pid, mount and net namespaces work")


def _loop_disk() -> Check:
    """The storage ceiling is a loop-mounted ext4 image; try a 16 MiB one."""
    if shutil.which("mkfs.ext4") is None:
        return Check(
            "storage ceiling", False, "mkfs.ext4 missing (Debian: apt-get install e2fsprogs)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        image, point = Path(tmp) / "disk.img", Path(tmp) / "mnt"
        point.mkdir()
        with open(image, "wb") as fh:
            fh.truncate(16 << 20)
        steps = [
            ["mkfs.ext4", "-q", "-F", str(image)],
            ["mount", "-o", "loop", str(image), str(point)],
        ]
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True)
            if done.returncode != 0:
                return Check("storage ceiling", False, f"{argv[0]}: {done.stderr.strip()}")
        subprocess.run(["umount", str(point)], capture_output=True)
    return Check("storage ceiling", True, "loop-mounted ext4 works")


def _engines() -> list[Check]:
    """The engine that answers on the Docker Engine API, as the oci backend will use it."""
    try:
        from levelfield.sandbox.oci import engine_report
    except ImportError:
        return [
            Check(
                "container engine",
                False,
                "the docker SDK is missing: pip install 'levelfield[oci]'",
                "oci",
            )
        ]
    from levelfield.sandbox._engine import other_engine_urls

    report = engine_report()
    checks = [Check("container engine", report.found, report.describe(), "oci")]
    for url in other_engine_urls(report.url):  # another engine here (podman beside Docker)
        other = engine_report(url)
        if other.found:
            checks.append(
                Check("other engine", True, f"{other.describe()} (DOCKER_HOST={url})", "oci")
            )
    return checks


def _output(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"
