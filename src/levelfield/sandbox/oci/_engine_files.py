"""The files the engine binds into a container (/etc/hosts, /etc/hostname, /etc/resolv.conf,
Podman's /run/.containerenv), moved onto the container's own filesystem before the agent runs.

Each is a bind mount of a file in the engine's folder of the container, on the engine's disk:
the storage ceiling (the engine's quota on the writable layer, or levelfield's disk under it)
does not reach it. An agent appending to /etc/hosts would fill the engine's disk, past its
ceiling and into every other trial's. So, under a ceiling, each such bind is taken off in the
container's mount namespace and its content written at the same path of the container's own
root, where the ceiling holds; the files read as they did. The engine never writes them again
here: the trial's network is levelfield's link, not the engine's.

`setns` into a mount namespace needs a single-threaded caller, so a small Python child of the
harness does it (no program of the image runs: the image's tools are not the harness's).
"""

from __future__ import annotations

import subprocess
import sys

from levelfield.errors import SandboxStartError

HELPER_TIMEOUT_S = 30.0
MAX_FILE_BYTES = 1 << 20  # the engine's files are a few hundred bytes

# argv: the container init's pid. Prints each moved path; exits non-zero with the reason.
_HELPER = r"""
import ctypes, os, re, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, MNT_DETACH = 0x00020000, 2
pid, limit = sys.argv[1], int(sys.argv[2])
points = []  # the init's writable mounts, as it sees them; read before the root changes
for line in open(f"/proc/{pid}/mountinfo").read().splitlines():
    fields = line.split()
    point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
    if "rw" in fields[5].split(",") and not point.startswith(("/proc/", "/dev/", "/sys/")):
        points.append(point)
ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
root = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)  # the container's, pivoted
if libc.setns(ns, CLONE_NEWNS) != 0:
    sys.exit(f"setns: {os.strerror(ctypes.get_errno())}")
os.fchdir(root)
os.chroot(".")  # nothing is imported from here on: the image's files are not the harness's
for point in points:
    try:
        if not stat.S_ISREG(os.stat(point).st_mode):
            continue
        with open(point, "rb") as fh:
            content = fh.read(limit)
    except OSError:
        continue
    if libc.umount2(point.encode(), MNT_DETACH) != 0:
        sys.exit(f"umount {point}: {os.strerror(ctypes.get_errno())}")
    if os.path.islink(point):
        os.unlink(point)  # the image's link there, never followed out of place
    fd = os.open(point, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    os.write(fd, content)
    os.close(fd)
    print(point)
"""


def onto_the_container(init_pid: int) -> list[str]:
    """Move every writable file the engine bound into the container onto its own root; the
    paths moved. Before the agent's first exec: nothing of the agent's runs there yet."""
    done = subprocess.run(
        [sys.executable, "-I", "-c", _HELPER, str(init_pid), str(MAX_FILE_BYTES)],
        capture_output=True,
        text=True,
        timeout=HELPER_TIMEOUT_S,
    )
    if done.returncode != 0:
        why = (done.stderr.strip() or f"exit {done.returncode}")[-300:]
        raise SandboxStartError(f"the engine's files could not be moved under the ceiling: {why}")
    return done.stdout.splitlines()


def describe(moved: list[str]) -> str:
    return (
        f"the engine's files bound into the container ({', '.join(moved)}) moved onto its own "
        "root, under the storage ceiling"
    )
