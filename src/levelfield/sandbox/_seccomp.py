"""The system calls a trial may make: those a default Docker container may make, on every backend.

Docker refuses a container every system call outside an allow-list (moby's default seccomp
profile), with EPERM: the keyring (add_key, keyctl, request_key), mounting, kernel modules,
namespaces, bpf, perf, clock setting, and more. The process backend has no engine to apply one,
and Podman's own default allows keyctl (containers-common 0.50, measured), through which a
container reaches root's user keyring on the host, shared by every trial and every run. So the
same rules, written here as our own table, become a BPF program (compiled once with libseccomp,
`libseccomp2` on Debian, through ctypes) for `process`, and a profile in the engines' JSON format
for `oci`, so that both engines apply one and the same profile.

A filter binds the process that loads it and everything it starts, so on `process` it must be
loaded on the way in of every exec: phases enter the sandbox with nsenter, they are not children
of its init. `filtered_argv` turns any command line into one that first joins a new, empty
session keyring (`each exec its own`), then loads the filter, then execs the command. The filter
it loads (`ENTERING`) also allows setns(2), which nsenter itself needs once the filter is on:
for a process without CAP_SYS_ADMIN in the namespace's owner, which no process in a sandbox can
gain (unshare, clone's namespace flags and clone3 are refused), the kernel refuses setns with
the same EPERM the profile would. A command that bubblewrap starts needs no exception: pass
`open_filter()` to its `--seccomp FD`, which loads the plain profile right before the exec.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import hashlib
import json
import os
import platform
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levelfield.sandbox import _signals

# -- the rules ---------------------------------------------------------------------------------

# Allowed to every container whatever its capabilities, grouped by what they are for.
FILES = (
    "access", "chdir", "chmod", "chown", "chown32", "close", "close_range", "copy_file_range",
    "creat", "dup", "dup2", "dup3", "faccessat", "faccessat2", "fadvise64", "fadvise64_64",
    "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat", "fchown", "fchown32",
    "fchownat", "fcntl", "fcntl64", "fdatasync", "fgetxattr", "flistxattr", "flock",
    "fremovexattr", "fsetxattr", "fstat", "fstat64", "fstatat64", "fstatfs", "fstatfs64",
    "fsync", "ftruncate", "ftruncate64", "futimesat", "getcwd", "getdents", "getdents64",
    "getxattr", "inotify_add_watch", "inotify_init", "inotify_init1", "inotify_rm_watch",
    "lchown", "lchown32", "lgetxattr", "link", "linkat", "listxattr", "llistxattr", "_llseek",
    "lremovexattr", "lseek", "lsetxattr", "lstat", "lstat64", "mkdir", "mkdirat", "mknod",
    "mknodat", "name_to_handle_at", "newfstatat", "open", "openat", "openat2", "pread64",
    "preadv", "preadv2", "pwrite64", "pwritev", "pwritev2", "read", "readahead", "readlink",
    "readlinkat", "readv", "removexattr", "rename", "renameat", "renameat2", "rmdir",
    "sendfile", "sendfile64", "setxattr", "splice", "stat", "stat64", "statfs", "statfs64",
    "statx", "symlink", "symlinkat", "sync", "sync_file_range", "syncfs", "tee", "truncate",
    "truncate64", "umask", "unlink", "unlinkat", "utime", "utimensat", "utimensat_time64",
    "utimes", "vmsplice", "write", "writev",
)  # fmt: skip
POLLING = (
    "epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old", "epoll_pwait", "epoll_pwait2",
    "epoll_wait", "epoll_wait_old", "eventfd", "eventfd2", "io_cancel", "io_destroy",
    "io_getevents", "io_pgetevents", "io_pgetevents_time64", "io_setup", "io_submit",
    "io_uring_enter", "io_uring_register", "io_uring_setup", "ioctl", "_newselect", "pause",
    "pipe", "pipe2", "poll", "ppoll", "ppoll_time64", "pselect6", "pselect6_time64", "select",
    "signalfd", "signalfd4", "timerfd_create", "timerfd_gettime", "timerfd_gettime64",
    "timerfd_settime", "timerfd_settime64",
)  # fmt: skip
PROCESSES = (
    "capget", "capset", "execve", "execveat", "exit", "exit_group", "fork", "get_robust_list",
    "get_thread_area", "getcpu", "getegid", "getegid32", "geteuid", "geteuid32", "getgid",
    "getgid32", "getgroups", "getgroups32", "getitimer", "getpgid", "getpgrp", "getpid",
    "getppid", "getpriority", "getresgid", "getresgid32", "getresuid", "getresuid32",
    "getrlimit", "getrusage", "getsid", "gettid", "getuid", "getuid32", "ioprio_get",
    "ioprio_set", "kill", "landlock_add_rule", "landlock_create_ruleset",
    "landlock_restrict_self", "membarrier", "pidfd_open", "pidfd_send_signal", "prctl",
    "prlimit64", "process_mrelease", "restart_syscall", "rseq", "rt_sigaction",
    "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend",
    "rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_tgsigqueueinfo", "sched_get_priority_max",
    "sched_get_priority_min", "sched_getaffinity", "sched_getattr", "sched_getparam",
    "sched_getscheduler", "sched_rr_get_interval", "sched_rr_get_interval_time64",
    "sched_setaffinity", "sched_setattr", "sched_setparam", "sched_setscheduler",
    "sched_yield", "seccomp", "set_robust_list", "set_thread_area", "set_tid_address",
    "setfsgid", "setfsgid32", "setfsuid", "setfsuid32", "setgid", "setgid32", "setgroups",
    "setgroups32", "setitimer", "setpgid", "setpriority", "setregid", "setregid32",
    "setresgid", "setresgid32", "setresuid", "setresuid32", "setreuid", "setreuid32",
    "setrlimit", "setsid", "setuid", "setuid32", "sigaltstack", "sigprocmask", "sigreturn",
    "tgkill", "tkill", "ugetrlimit", "uname", "vfork", "wait4", "waitid", "waitpid",
)  # fmt: skip
MEMORY = (
    "brk", "madvise", "memfd_create", "memfd_secret", "mincore", "mlock", "mlock2", "mlockall",
    "mmap", "mmap2", "mprotect", "mremap", "msync", "munlock", "munlockall", "munmap",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "remap_file_pages",
)  # fmt: skip
TIME = (
    "adjtimex", "alarm", "clock_adjtime", "clock_adjtime64", "clock_getres",
    "clock_getres_time64", "clock_gettime", "clock_gettime64", "clock_nanosleep",
    "clock_nanosleep_time64", "futex", "futex_time64", "futex_waitv", "gettimeofday",
    "nanosleep", "sysinfo", "time", "timer_create", "timer_delete", "timer_getoverrun",
    "timer_gettime", "timer_gettime64", "timer_settime", "timer_settime64", "times",
)  # fmt: skip
NETWORK = (
    "accept", "accept4", "bind", "connect", "getpeername", "getrandom", "getsockname",
    "getsockopt", "listen", "recv", "recvfrom", "recvmmsg", "recvmmsg_time64", "recvmsg",
    "send", "sendmmsg", "sendmsg", "sendto", "setsockopt", "shutdown", "socketcall",
    "socketpair",
)  # fmt: skip
# System V and POSIX IPC: a trial's own, in its own IPC namespace.
IPC = (
    "ipc", "mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedreceive_time64",
    "mq_timedsend", "mq_timedsend_time64", "mq_unlink", "msgctl", "msgget", "msgrcv", "msgsnd",
    "semctl", "semget", "semop", "semtimedop", "semtimedop_time64", "shmat", "shmctl", "shmdt",
    "shmget",
)  # fmt: skip
# Safe from kernel 4.8 on, when seccomp began to re-check a traced process's system calls.
TRACING = ("ptrace", "process_vm_readv", "process_vm_writev")
TRACING_SINCE = (4, 8)
# Per architecture: only where the call exists and is needed there.
ARCH_CALLS = {
    "x86_64": ("arch_prctl", "modify_ldt"),
    "aarch64": ("arm_fadvise64_64", "arm_sync_file_range", "sync_file_range2", "breakpoint",
                "cacheflush", "set_tls"),
}  # fmt: skip
# What a capability adds, for the capabilities a container may hold. The default set holds
# only sys_chroot of these; the others are listed so that the table says what stays refused.
BY_CAPABILITY = {
    "sys_chroot": ("chroot",),
    "dac_read_search": ("open_by_handle_at",),
    "sys_boot": ("reboot",),
    "sys_module": ("delete_module", "init_module", "finit_module"),
    "sys_pacct": ("acct",),
    "sys_ptrace": ("kcmp", "pidfd_getfd", "process_madvise"),
    "sys_rawio": ("iopl", "ioperm"),
    "sys_time": ("settimeofday", "stime", "clock_settime", "clock_settime64"),
    "sys_tty_config": ("vhangup",),
    "sys_nice": ("get_mempolicy", "mbind", "set_mempolicy", "set_mempolicy_home_node"),
    "syslog": ("syslog",),
}
AF_VSOCK = 40  # socket(2) for any other address family
# personality(2): Linux, Linux with 32-bit addresses, UNAME26 with either, and the query (-1)
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
# clone(2) without any flag that makes a namespace (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
# NEWUSER, NEWPID, NEWNET): a plain fork or thread
CLONE_NAMESPACE_FLAGS = 0x7E020000
ENTRY_CALLS = ("setns",)  # what nsenter needs after `filtered_argv` loaded the filter


@dataclass(frozen=True, slots=True)
class Rule:
    """Allow `name`, when `arg` compares so (op: "ne", "eq" or "masked_eq" with mask and value)."""

    name: str
    arg: tuple[int, str, int, int] | None = None  # (index, op, value or mask, masked value)


def rules(capabilities: Iterable[str], *, entering: bool = False) -> tuple[Rule, ...]:
    """The profile for a process holding `capabilities` (DEFAULT_CAPABILITIES' names)."""
    names = [*FILES, *POLLING, *PROCESSES, *MEMORY, *TIME, *NETWORK, *IPC]
    if _kernel() >= TRACING_SINCE:
        names += TRACING
    names += ARCH_CALLS.get(platform.machine(), ())
    for capability in sorted(set(capabilities)):
        names += BY_CAPABILITY.get(capability, ())
    if entering:
        names += ENTRY_CALLS
    found = [Rule(name) for name in dict.fromkeys(names)]
    found.append(Rule("socket", (0, "ne", AF_VSOCK, 0)))
    found += [Rule("personality", (0, "eq", value, 0)) for value in PERSONALITIES]
    found.append(Rule("clone", (0, "masked_eq", CLONE_NAMESPACE_FLAGS, 0)))
    return tuple(found)


NOT_IMPLEMENTED = ("clone3",)  # ENOSYS, not EPERM: the C library then falls back to clone(2)


def _kernel() -> tuple[int, int]:
    parts = platform.release().split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0])
    except (IndexError, ValueError):
        return (0, 0)


# -- the engines' JSON profile -----------------------------------------------------------------

_OPS = {"ne": "SCMP_CMP_NE", "eq": "SCMP_CMP_EQ", "masked_eq": "SCMP_CMP_MASKED_EQ"}
_SUB_ARCHES = {"x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
               "aarch64": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]}  # fmt: skip


def engine_profile(capabilities: Iterable[str]) -> dict[str, Any]:
    """The rules in the format Docker and Podman read (`--security-opt seccomp=...`)."""
    plain = sorted(r.name for r in rules(capabilities) if r.arg is None)
    syscalls: list[dict[str, Any]] = [{"names": plain, "action": "SCMP_ACT_ALLOW"}]
    for rule in rules(capabilities):
        if rule.arg is not None:
            index, op, value, masked = rule.arg
            arg = {"index": index, "value": value, "valueTwo": masked, "op": _OPS[op]}
            syscalls.append({"names": [rule.name], "action": "SCMP_ACT_ALLOW", "args": [arg]})
    syscalls.append(
        {"names": list(NOT_IMPLEMENTED), "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS}
    )
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.EPERM,
        "architectures": _SUB_ARCHES.get(platform.machine(), []),
        "syscalls": syscalls,
    }


def engine_profile_file(capabilities: Iterable[str]) -> Path:
    """The profile as a file, for an engine that takes a path (Podman)."""
    text = json.dumps(engine_profile(capabilities), sort_keys=True)
    return _stored(f"profile-{_digest(text.encode())}.json", text.encode())


# -- the BPF program, through libseccomp ---------------------------------------------------------

ACT_ALLOW = 0x7FFF0000


def _act_errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


_CMP = {"ne": 1, "eq": 4, "masked_eq": 7}  # enum scmp_compare
_NR_ERROR = -1  # __NR_SCMP_ERROR: a name this libseccomp does not know on any of the arches
_ARCH_NAMES = {"x86_64": ("x86", "x32"), "aarch64": ("arm",)}


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


class SeccompUnavailable(OSError):
    """libseccomp is missing or refused to build the filter."""


@functools.cache
def _libseccomp() -> Any:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(
            f"libseccomp not found ({exc}): Debian: apt-get install libseccomp2"
        ) from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_arch_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.seccomp_arch_resolve_name.restype = ctypes.c_uint32
    lib.seccomp_arch_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_ArgCmp)
    ]  # fmt: skip
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


@functools.cache
def compiled(*, entering: bool) -> bytes:
    """The BPF program for a default container's capabilities (less mknod, which has no call
    of its own), for this machine's architecture and its 32-bit ones."""
    from levelfield.sandbox import DEFAULT_CAPABILITIES

    lib = _libseccomp()
    ctx = lib.seccomp_init(_act_errno(errno.EPERM))
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        for arch in _ARCH_NAMES.get(platform.machine(), ()):
            token = lib.seccomp_arch_resolve_name(arch.encode())
            if token and lib.seccomp_arch_add(ctx, token) not in (0, -errno.EEXIST):
                raise SeccompUnavailable(f"seccomp_arch_add({arch}) failed")
        for rule in rules(DEFAULT_CAPABILITIES, entering=entering):
            _add(lib, ctx, ACT_ALLOW, rule)
        for name in NOT_IMPLEMENTED:
            _add(lib, ctx, _act_errno(errno.ENOSYS), Rule(name))
        with tempfile.TemporaryFile() as out:
            if lib.seccomp_export_bpf(ctx, out.fileno()) != 0:
                raise SeccompUnavailable("seccomp_export_bpf failed")
            out.seek(0)
            return out.read()
    finally:
        lib.seccomp_release(ctx)


def _add(lib: Any, ctx: int, action: int, rule: Rule) -> None:
    number = lib.seccomp_syscall_resolve_name(rule.name.encode())
    if number == _NR_ERROR:
        return  # a call this architecture (and its 32-bit ones) does not have
    args = (_ArgCmp * 1)()
    count = 0
    if rule.arg is not None:
        index, op, value, masked = rule.arg
        args[0] = _ArgCmp(index, _CMP[op], value, masked)
        count = 1
    done = lib.seccomp_rule_add_array(ctx, action, number, count, args)
    if done != 0:
        raise SeccompUnavailable(f"seccomp rule for {rule.name}: {os.strerror(-done)}")


# -- loading it ---------------------------------------------------------------------------------

FILTER_DIR = Path("/run/levelfield/seccomp")  # root's own: the filter a phase loads is trusted
# keyctl(2)'s number, for the new session keyring each exec joins before the filter refuses it
KEYCTL = {"x86_64": 250, "aarch64": 219, "i686": 288}
# Run by the harness's own interpreter (-I -S: no site, no environment), in place of the
# command: default signal handling, a new session keyring, no-new-privileges, the filter, then
# the command itself.
LOADER = (
    _signals.RESET
    + f"""\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
nr = {KEYCTL}.get(os.uname().machine)
if nr is not None and libc.syscall(nr, 1, None) < 0 and ctypes.get_errno() != 38:
    sys.exit("levelfield: no new session keyring: " + os.strerror(ctypes.get_errno()))
with open(sys.argv[1], "rb") as f:
    code = f.read()
buf = ctypes.create_string_buffer(code, len(code))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(len(code) // 8, ctypes.addressof(buf))
if libc.prctl(38, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.byref(prog), 0, 0):
    sys.exit("levelfield: seccomp filter not loaded: " + os.strerror(ctypes.get_errno()))
os.execvp(sys.argv[2], sys.argv[2:])
"""
)


def filter_path(*, entering: bool = True) -> Path:
    """The compiled filter, stored once per content under FILTER_DIR."""
    code = compiled(entering=entering)
    return _stored(f"{'entering' if entering else 'plain'}-{_digest(code)}.bpf", code)


def filtered_argv(argv: Sequence[str], *, entering: bool = True) -> list[str]:
    """`argv`, run under the profile with a new, empty session keyring. `entering` keeps setns
    for an nsenter in `argv`; without it, `argv` gets the plain profile."""
    return [sys.executable, "-I", "-S", "-c", LOADER, str(filter_path(entering=entering)), *argv]


def open_filter(*, entering: bool = False) -> int:
    """A descriptor of the compiled filter, for bubblewrap's `--seccomp FD` (pass it with
    `pass_fds`). One per bubblewrap: it reads the descriptor to its end, so a second one given
    the same descriptor finds nothing (EINVAL). The caller closes it."""
    return os.open(filter_path(entering=entering), os.O_RDONLY | os.O_CLOEXEC)


def problems() -> list[str]:
    """What stops the filter on this host: libseccomp missing, or a compile that fails."""
    try:
        filter_path(entering=True)
        filter_path(entering=False)
    except (SeccompUnavailable, OSError) as exc:
        return [f"seccomp filter: {exc}"]
    return []


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _stored(name: str, data: bytes) -> Path:
    path = FILTER_DIR / name
    if path.is_file():
        return path
    FILTER_DIR.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd, tmp = tempfile.mkstemp(dir=FILTER_DIR, prefix=".partial-")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)  # atomic: another harness writing the same bytes is harmless
    return path
