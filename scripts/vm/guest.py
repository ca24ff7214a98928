"""PID 1 of the cgroup v2 VM, after the initramfs built the root: run one command, then power off.

The command runs as `systemd-run --scope -p Delegate=yes` would start it on a cgroup v2 host: in a
scope cgroup of its own (vm.slice/command.scope) that has memory, cpu and pids available but not
enabled below it, with its own processes inside. Its stdout and stderr are virtio serial ports
that QEMU writes to the host script's stdout and stderr; its exit status goes to the control
share. As PID 1 this also reaps every orphan, as an init must.
"""

import ctypes
import json
import os
import signal
import sys
from pathlib import Path

CONTROL = Path("/run/levelfield-vm")
CGROUP = Path("/sys/fs/cgroup")
SCOPE = CGROUP / "vm.slice" / "command.scope"
CONTROLLERS = "+memory +cpu +pids"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LINUX_REBOOT_CMD_POWER_OFF = 0x4321FEDC


def port(name: str) -> str:
    """The /dev node of the virtio serial port QEMU named `name` (no udev to make symlinks)."""
    for entry in Path("/sys/class/virtio-ports").iterdir():
        if (entry / "name").read_text().strip() == name:
            return f"/dev/{entry.name}"
    raise RuntimeError(f"no virtio serial port named {name}")


def delegate_scope() -> None:
    SCOPE.mkdir(parents=True, exist_ok=True)
    (SCOPE.parent / "cgroup.subtree_control").write_text(CONTROLLERS)


def run_command(request: dict) -> int:
    out, err = port("lf.stdout"), port("lf.stderr")
    env = {"PATH": f"{request['cwd']}/.venv/bin:{BASE_PATH}", "HOME": "/root",
           "LANG": "C.UTF-8", "TERM": "dumb", **request["env"]}
    pid = os.fork()
    if pid == 0:
        try:
            (SCOPE / "cgroup.procs").write_text(str(os.getpid()))
            os.setsid()
            os.chdir(request["cwd"])
            stdin = os.open("/dev/null", os.O_RDONLY)
            os.dup2(stdin, 0)
            os.dup2(os.open(out, os.O_WRONLY), 1)
            os.dup2(os.open(err, os.O_WRONLY), 2)
            os.execvpe(request["argv"][0], request["argv"], env)
        except OSError as exc:
            print(f"vm: cannot run {request['argv'][0]}: {exc}", file=sys.stderr, flush=True)
            os._exit(127)
    while True:  # PID 1 reaps every orphan until the command itself exits
        done, status = os.wait()
        if done == pid:
            return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else (
                128 + os.WTERMSIG(status)
            )


def power_off() -> None:
    os.sync()  # the checkout's share writes through (cache=mmap); this flushes the rest
    ctypes.CDLL(None, use_errno=True).reboot(LINUX_REBOOT_CMD_POWER_OFF)


def main() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        request = json.loads((CONTROL / "request.json").read_text())
        delegate_scope()
        code = run_command(request)
        (CONTROL / "status").write_text(f"{code}\n")
    except Exception as exc:  # noqa: BLE001 - PID 1 must always power off
        (CONTROL / "failed").write_text(f"vm guest: {exc!r}\n")
    finally:
        power_off()


if __name__ == "__main__":
    main()
