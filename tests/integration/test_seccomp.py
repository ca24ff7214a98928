"""The system-call profile, loaded for real (sandbox/_seccomp.py): by `filtered_argv` on the way in
of any command (what every process phase does), and by bubblewrap from `open_filter()`. What the
profile refuses returns EPERM, as in a default Docker container; what it allows still works."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from levelfield.sandbox import _seccomp

pytestmark = pytest.mark.sandbox

# Each line: name, the call's result, errno. x86-64 numbers: keyctl 250, add_key 248,
# unshare 272 (CLONE_NEWUSER), setns 308, mount 165.
PROBE = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, *args):
    ctypes.set_errno(0)
    print(name, libc.syscall(*args), ctypes.get_errno())
call("keyctl", 250, 0, -4, 0)
call("add_key", 248, b"user", b"levelfield-probe", b"x", 1, -4)
call("unshare", 272, 0x10000000)
call("setns", 308, 0, 0)
call("mount", 165, b"none", b"/mnt", b"tmpfs", 0, None)
print("fork", os.waitpid(os.fork() or os._exit(7), 0)[1] >> 8)
print(open("/proc/self/status").read().split("Seccomp:")[1].split()[0])
"""


def probe(argv: list[str], **kwargs: object) -> dict[str, list[str]]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True, **kwargs)
    lines = [line.split() for line in done.stdout.splitlines()]
    return {parts[0]: parts[1:] for parts in lines}


def test_a_command_run_through_filtered_argv_is_refused_what_docker_refuses() -> None:
    before = probe([sys.executable, "-c", PROBE])
    after = probe(_seccomp.filtered_argv([sys.executable, "-c", PROBE], entering=False))
    for name in ("keyctl", "add_key", "unshare", "mount"):
        assert after[name] == ["-1", "1"], (name, after[name])  # EPERM, as Docker's
    assert after["setns"] == ["-1", "1"]  # the plain profile: no way in needed
    assert after["fork"] == ["7"] and after["2"] == [] and before["0"] == []


def test_the_way_in_keeps_setns_for_nsenter_and_refuses_the_rest() -> None:
    entering = probe(_seccomp.filtered_argv([sys.executable, "-c", PROBE]))
    assert entering["setns"] == ["-1", "22"]  # the kernel's own answer (EINVAL: fd 0 is no
    # namespace), not the filter's EPERM
    assert entering["keyctl"] == ["-1", "1"] and entering["unshare"] == ["-1", "1"]


def test_bubblewrap_loads_the_same_filter_from_open_filter() -> None:
    fd = _seccomp.open_filter()
    try:
        found = probe(
            ["bwrap", "--dev-bind", "/", "/", "--seccomp", str(fd), sys.executable, "-c", PROBE],
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
    assert found["keyctl"] == ["-1", "1"] and found["setns"] == ["-1", "1"]
    assert found["2"] == []
