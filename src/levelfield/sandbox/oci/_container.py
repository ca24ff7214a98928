"""Container mechanics of the `oci` backend: exec streaming with a timeout, the kill of a timed-out
exec's processes, the container's cgroup directories, and small tar and exit-code helpers.

Kept apart from the backend (`__init__.py`) so that the backend reads as its Protocol methods;
nothing here talks to the engine except through the `APIClient` it is handed.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from levelfield.errors import HostUnsupported, SandboxDied
from levelfield.sandbox import cgroups

EXEC_POLL_S = 0.25  # how often a running exec is inspected: ~1 API call per poll
EXEC_DRAIN_S = 0.5  # output still in flight after the exec's main process ended
EXEC_SETTLE_S = 2.0  # an engine's exec state lags its process's end by milliseconds; 2 s is ample


def container_cgroup(pid: int, container_id: str) -> cgroups.TrialCgroup | None:
    """The cgroup directories of a container's init, read from /proc/PID/cgroup on this host.

    Reuses `TrialCgroup`'s readers (the same counters as the process backend) on the engine's
    directories. None when the engine's processes are not this host's: a remote engine (its PID
    is another machine's), or this harness in a container of its own (another PID namespace).
    The PID alone cannot tell, as a process of ours may hold the same number; every engine names
    its container's cgroup after the container's ID (docker/ID, libpod-ID, docker-ID.scope),
    so a path without it is someone else's.
    """
    try:
        own = cgroups._own_paths(Path(f"/proc/{pid}/cgroup").read_text()) if pid else None
        host = cgroups.detect()
    except (OSError, HostUnsupported):
        return None
    if not own or not any(container_id in path for path in own.values()):
        return None
    if host.version == 2:
        dirs = {"unified": cgroups.CGROUP_ROOT / own.get("", "/").lstrip("/")}
    else:
        mounts = cgroups._v1_mounts(Path("/proc/mounts").read_text())
        dirs = {c: mounts[c] / own.get(c, "/").lstrip("/") for c in cgroups.V1_CONTROLLERS}
    return cgroups.TrialCgroup.at(host, dirs)  # the engine's directories, not ours


def memory_key(cgroup: cgroups.TrialCgroup) -> str:
    return "unified" if cgroup.is_v2 else "memory"


def run_exec(api: Any, exec_id: str, log: Any, timeout_s: float) -> bool:
    """Stream an exec's output into `log` until its main process ends; True if it timed out.

    Docker keeps the stream open while a background child holds stdout, so the end is taken from
    the exec's state, not from the end of the stream (podman closes the stream itself).
    """
    sock = api.exec_start(exec_id, socket=True)
    reader = threading.Thread(target=_copy_frames, args=(sock, log), daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    timed_out = False
    while reader.is_alive():
        reader.join(min(EXEC_POLL_S, max(0.0, deadline - time.monotonic())))
        if not reader.is_alive():
            break
        if time.monotonic() >= deadline:
            timed_out = True
            _kill_tree(int(api.exec_inspect(exec_id).get("Pid") or 0))
            reader.join(EXEC_DRAIN_S)
            break
        if not api.exec_inspect(exec_id).get("Running"):
            reader.join(EXEC_DRAIN_S)
            break
    _shutdown(sock)
    reader.join(EXEC_DRAIN_S)
    return timed_out or _outlived_stream(api, exec_id, deadline)


def _outlived_stream(api: Any, exec_id: str, deadline: float) -> bool:
    """The stream can end before the exec does: a restarted engine API service drops it while
    the process runs on. Wait for the exec's own end (True: it reached the timeout). An exec
    that ended while no service watched it has no exit code: podman still calls it running."""
    settle = time.monotonic() + EXEC_SETTLE_S
    while True:
        state = api.exec_inspect(exec_id)
        if not state.get("Running"):
            return False
        pid = int(state.get("Pid") or 0)
        if time.monotonic() >= deadline:
            _kill_tree(pid)
            return True
        if not (pid and Path(f"/proc/{pid}").exists()) and time.monotonic() >= settle:
            raise SandboxDied(
                "the engine's API dropped the phase's stream (its service restarted?) and lost "
                "track of it: the phase ran on, but its exit code and later output are unknown"
            )
        time.sleep(EXEC_POLL_S)


def _copy_frames(sock: Any, log: Any) -> None:
    from docker.utils.socket import frames_iter

    with contextlib.suppress(OSError, ValueError):
        for _, data in frames_iter(sock, tty=False):
            log.write(data)
            log.flush()


def _shutdown(sock: Any) -> None:
    raw = getattr(sock, "_sock", sock)
    with contextlib.suppress(OSError, AttributeError):
        raw.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def _kill_tree(pid: int) -> None:
    """SIGKILL an exec's process group and every descendant, from the host.

    runc makes the exec'd bash a session and group leader, so killpg reaches what it started;
    the /proc walk catches children that moved to their own group. Needs a local engine (the
    PID is the host's); with a remote engine the timed-out phase is left to the container's end.
    """
    if pid <= 0:
        return
    for _ in range(20):
        pids = [pid, *_descendants(pid)]
        alive = [p for p in pids if Path(f"/proc/{p}").exists()]
        if not alive:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for p in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.05)


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                kids = [int(x) for x in children.read_text().split()]
                found += kids
                stack += kids
    return found


def dirs_tar(names: tuple[str, ...]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
    return buffer.getvalue()
