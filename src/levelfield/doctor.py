"""What this host can enforce: each mechanism tried for real, not guessed from files.

Each check creates and removes what it tests (a cgroup, a bubblewrap namespace, a loop-mounted
disk), so a green line means the process backend will work, not merely that a file exists. The
last checks start a real sandbox on each backend (a container on each engine, from an image the
engine already has) and read, from a shell inside, what an agent holds there: its effective
capabilities, no-new-privileges, its seccomp mode and its cgroup namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from levelfield.errors import HostUnsupported
from levelfield.sandbox import Backend, BackendOptions, Sandbox, cgroups


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    needed_by: str = "process"
    url: str | None = None  # an engine's address, for the checks that start a container on it


def run_checks() -> list[Check]:
    engines = _engines()
    shells = [_agent_shell_process(), *(_agent_shell_oci(c) for c in engines if c.url)]
    return [_root(), *_cgroups(), _bwrap(), _loop_disk(), *engines, *shells]


def _root() -> Check:
    is_root = os.geteuid() == 0
    return Check("root", is_root, "running as root" if is_root else "cgroups and mounts need root")


def _cgroups() -> list[Check]:
    try:
        host = cgroups.detect()
    except HostUnsupported as exc:
        return [Check("cgroups", False, str(exc))]
    checks = [Check("cgroup version", True, host.describe())]
    probe = cgroups.TrialCgroup(host, "doctor", uuid.uuid4().hex[:8])
    for name, path in probe.dirs.items():
        checks.append(_cgroup_writable(name, path, delegate=host.version == 2))
    for base in host.bases.values():
        cgroups.remove_tree(base / cgroups.PREFIX / "doctor")
    if host.version == 2:
        checks.append(_memory_floor(host.bases["unified"]))
    return checks


def _cgroup_writable(name: str, path: Path, *, delegate: bool) -> Check:
    """On v2 the controllers must also be enabled down to the trial, as a trial's start does."""
    try:
        if delegate:
            cgroups.enable_v2_controllers(path)
        path.mkdir(parents=True, exist_ok=True)
    except HostUnsupported as exc:
        return Check(f"cgroup {name}", False, str(exc))
    except OSError as exc:
        return Check(f"cgroup {name}", False, f"cannot create {path}: {exc.strerror}")
    done = "memory, cpu and pids delegated" if delegate else "writable"
    return Check(f"cgroup {name}", True, f"{done} under {path.parents[2]}")


def _memory_floor(own: Path) -> Check:
    """Floors are best effort, so a void memory.low is said, not failed."""
    gap = cgroups.unprotected_ancestor(own)
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
    from levelfield.sandbox.oci import other_engine_urls

    report = engine_report()
    url = report.url if report.found else None
    checks = [Check("container engine", report.found, report.describe(), "oci", url)]
    for url in other_engine_urls(report.url):  # another engine here (podman beside Docker)
        other = engine_report(url)
        if other.found:
            detail = f"{other.describe()} (DOCKER_HOST={url})"
            checks.append(Check("other engine", True, detail, "oci", url))
    return checks


def _output(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exc})"


# -- what an agent's shell holds, read from inside a real sandbox -------------------------------

SHELL_PROBE = (
    "grep -E '^(CapEff|NoNewPrivs|Seccomp|Seccomp_filters):' /proc/self/status; "
    "grep -E ':memory:|^0::' /proc/self/cgroup"
)
# /proc/PID/status's Seccomp: field (proc(5))
SECCOMP_MODES = {"0": "OFF", "1": "strict", "2": "filter"}
# The kernel's capability numbers (linux/capability.h), for naming a CapEff mask
CAPABILITY_NAMES = (
    "chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
    "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
    "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
    "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
    "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
    "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore",
)  # fmt: skip


def capability_names(mask: int) -> list[str]:
    return [name for bit, name in enumerate(CAPABILITY_NAMES) if mask >> bit & 1] + [
        f"cap_{bit}" for bit in range(len(CAPABILITY_NAMES), 64) if mask >> bit & 1
    ]


def read_shell(output: str) -> Check:
    """What SHELL_PROBE printed → a check: green when no capability beyond what levelfield grants
    (a default container's less net_raw) is effective, no-new-privileges is on and a seccomp
    filter binds it. The set is named against Docker's default."""
    from levelfield.sandbox import DEFAULT_CAPABILITIES, DOCKER_DEFAULT_CAPABILITIES

    fields = {
        k: v.strip()
        for k, _, v in (line.partition(":") for line in output.splitlines())
        if k in ("CapEff", "NoNewPrivs", "Seccomp", "Seccomp_filters")
    }
    try:
        effective = int(fields["CapEff"].strip(), 16)
    except (KeyError, ValueError):
        return Check("agent shell", False, f"could not read its status: {output.strip()[-200:]}")
    held = capability_names(effective)
    beyond = [c for c in held if c not in DEFAULT_CAPABILITIES]
    less = [c for c in DOCKER_DEFAULT_CAPABILITIES if c not in held]
    named = "Docker's default set" + (f" less {', '.join(less)}" if less else "")
    no_new = fields.get("NoNewPrivs", "") == "1"
    seccomp = SECCOMP_MODES.get(fields.get("Seccomp", ""), "unknown")
    filters = f" ({fields['Seccomp_filters']} filter)" if "Seccomp_filters" in fields else ""
    cgroups = [line for line in output.splitlines() if line[:1].isdigit()]
    own_ns = bool(cgroups) and cgroups[0].endswith(":/")  # memory's (v1), or the one (v2)
    detail = (
        f"CapEff {effective:016x} "
        + (f"(BEYOND levelfield's set: {', '.join(beyond)})" if beyond else f"({named})")
        + f"; no-new-privileges {'on' if no_new else 'OFF'}"
        + f"; seccomp {seccomp}{filters if seccomp == 'filter' else ''}"
        + f"; cgroup namespace {'its own' if own_ns else 'the host one'}"
    )
    return Check("agent shell", not beyond and no_new and seccomp == "filter", detail)


def _probe(backend: Backend, start: Callable[..., Sandbox], where: str, needed_by: str) -> Check:
    """Start a sandbox with `start(task, limits, trial_id=, trial_dir=)`, run the probe in it as
    an agent's phase runs, and remove everything it made."""
    from levelfield.policy import PRESETS, apply_policy
    from levelfield.tasks import Spec, Task

    name = f"agent shell ({where})"
    with tempfile.TemporaryDirectory() as tmp:
        spec = Spec(cpus=0.5, memory_bytes=64 << 20, storage_bytes=16 << 20)
        task = Task("doctor", Path(tmp), spec, "", 30.0, 30.0, 60.0, PurePosixPath("/app"))
        log = Path(tmp) / "probe.log"
        try:
            box = start(task, apply_policy(PRESETS["strict"], spec), trial_id="shell",
                        trial_dir=Path(tmp) / "trial")  # fmt: skip
            try:
                box.exec(SHELL_PROBE, timeout_s=60, log_path=log)
            finally:
                box.close()
        except Exception as exc:  # any failure is the finding
            return Check(name, False, f"{type(exc).__name__}: {exc}", needed_by)
        finally:
            backend.reap(backend.options.run_id)  # type: ignore[attr-defined]
        found = read_shell(log.read_text(errors="replace") if log.exists() else "")
    return Check(name, found.ok, found.detail, needed_by)


def _agent_shell_process() -> Check:
    from levelfield.sandbox.process import ProcessBackend

    backend = ProcessBackend(_probe_options())
    problems = backend.check()
    if problems:
        return Check("agent shell (process)", False, "; ".join(problems))
    return _probe(backend, backend.start, "process", "process")


PROBE_IMAGES = ("debian:bookworm-slim", "ubuntu:24.04", "python:3.13-slim-bookworm")


def _agent_shell_oci(engine: Check) -> Check:
    """On an image the engine already has (doctor never pulls): a stand-in base if there."""
    from levelfield.sandbox.oci import OciBackend, OciSettings

    backend = OciBackend(_probe_options(), OciSettings(engine.url))
    where = backend.report().engine
    image = backend.present_image(PROBE_IMAGES)
    if image is None:
        names = ", ".join(PROBE_IMAGES)
        return Check(f"agent shell ({where})", False, f"not tried: it has none of {names}", "oci")
    return _probe(backend, partial(backend.start_on, image), where, "oci")


def _probe_options() -> BackendOptions:
    return BackendOptions(f"doctor-{uuid.uuid4().hex[:8]}", Path(tempfile.gettempdir()))
