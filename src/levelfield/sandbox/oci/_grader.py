"""The grader's view of an `oci` trial: the container's own filesystem, entered from the host.

An exec through the engine always lands in the container's namespaces, beside whatever the agent
left running, and the engine offers no private mount or PID namespace for one exec. So the grader
is started on this host (`grader.py`) over the container's filesystem as the engine mounted it:
the root is a fresh tmpfs holding the container's top-level folders, each bound by descriptor
from the overlay's merged directory (opened without following a link the agent put there), the
container's volumes at their places, and its cgroup read-only at /sys/fs/cgroup. It joins the
container's network namespace and cgroup, and starts with the image's environment.

A container's filesystem is the agent's to change, and the grader checks what it changed; but the
grader's /etc is a copy, taken as grading begins, in which the grader's start-up is the image's:
the configuration of the tools a grader's bootstrap runs (pip, uv, wget, git, npm, apt with its
sources and hooks) and the dynamic loader's preload list as the image had them (a file the agent
added there is left out), and /etc/hosts, /etc/resolv.conf and /etc/hostname as the engine wrote
them when the container started (rewritten, they would send the grader's downloads to a server
of the agent's on its loopback). Programs, and Python's site-wide hooks (.pth files,
sitecustomize), are not reset: a task may ask the agent to install the very packages and
programs its tests run. Those of a grader's bootstrap that the agent changed are named in the
trial's notes.

This needs the engine on this host (its merged directory and its processes visible here); with
a remote engine there is no view and the grader runs in the container, as Harbor runs it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from levelfield.sandbox import (
    DEFAULT_CAPABILITIES,
    GraderView,
    _bwrap,
    _processes,
    bind_agent_logs,
    shell_start_up,
    trees,
)
from levelfield.sandbox.oci import _offline

# The grader's own mounts at the top of the container's root (/tests and /logs/verifier from its
# disk, /etc its copy, /proc, /dev, /sys and /run its own).
MOUNTED_TOP = ("proc", "dev", "sys", "run", "etc", "tests", "logs")
LOGS = PurePosixPath("/logs")
SHIM = PurePosixPath(_offline.SHIM_UV_DIR).parent  # the container's own binds of the uv shim
GRADER_SHIM = PurePosixPath("/run/levelfield-grader/shim")  # the grader's, out of the agent's tree
ENGINE_FILES = {"hosts": "HostsPath", "resolv.conf": "ResolvConfPath", "hostname": "HostnamePath"}
ENGINE_FILE_MAX_BYTES = 1 << 20
ETC_COPY_MAX_BYTES = 64 << 20
RESET = re.compile(
    r"^/etc/(ld\.so\.preload|pip\.conf|pip/.+|xdg/pip/.+|uv/.+|xdg/uv/.+|wgetrc|gitconfig"
    r"|npmrc|apt/.+|python3[\d.]*/.+)$"
)
# Python runs these at every start: a .pth of a site folder, sitecustomize and usercustomize
# (a module, its bytecode, an extension, or a package) anywhere on the standard sys.path.
PYTHON_HOOK = re.compile(
    r"^(?P<site>/usr(/local)?/lib/python3[\d.]*(/(site|dist)-packages)?)/"
    r"(?P<name>[^/]+\.pth|(sitecustomize|usercustomize)(\.[^/]*)?|(sitecustomize|usercustomize)/.*)$"
)
# The standard library (its sources and extensions, outside the site folders) and pip's
# configuration under Python's prefix: the image's, whatever the agent wrote there. No install
# puts a file there, so none is the agent's to keep. (Bytecode the grader never reads from the
# container: its Python caches under a prefix of its own, `grader.py`.)
STDLIB = re.compile(
    r"^/usr(/local)?/(lib/python3[\d.]*/(?!(site|dist)-packages/).+\.(py|so)|pip\.conf)$"
)
MAX_HIDDEN = 2048  # binds over the agent's files; past it, the rest are named, not hidden
START_UP = frozenset({"sitecustomize", "usercustomize"})  # never a package's: no RECORD keeps one
# Configuration a test runner reads from the top of the filesystem (pytest looks in the folders
# above /tests): never made again in the grader's root from a link of the agent's.
TOP_CONFIG = frozenset({"pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg",
                        "conftest.py", "pip.conf", "uv.toml"})  # fmt: skip
BOOTSTRAP = re.compile(
    r"^/(usr/(local/)?)?s?bin/(bash|sh|dash|env|curl|wget|apt|apt-get|dpkg|uv|uvx|pytest"
    r"|python[\d.]*|pip[\d.]*)$"
)
RECORD_MAX_BYTES = 4 << 20
CHANGED, ADDED = 0, 1  # the engine's diff kinds (2: deleted)
O_PATH_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Container:
    """What the view is made from, read by the container sandbox (`_sandbox.py`)."""

    inspected: Mapping[str, Any]
    init_pid: int
    cgroup: Any  # cgroups.TrialCgroup of the container, or None when not this host's
    workdir: PurePosixPath
    engine_files: Mapping[str, bytes]  # /etc's engine-written files, as at the start
    changes: list[tuple[str, int]] | None  # the engine's diff against the image
    shim: tuple[Path, Path] | None  # the uv shim's uv and CPython on the host, when used


def snapshot_engine_files(inspected: Mapping[str, Any]) -> dict[str, bytes]:
    """/etc/hosts, /etc/resolv.conf and /etc/hostname as the engine wrote them, read on the host
    at the container's start, before the agent could change them."""
    found = {}
    for name, key in ENGINE_FILES.items():
        source = inspected.get(key)
        if not source:
            continue
        with contextlib.suppress(OSError), open(source, "rb") as fh:
            found[name] = fh.read(ENGINE_FILE_MAX_BYTES)
    return found


def grader_view(container: Container, scratch: Path) -> GraderView | None:
    """None when the container's filesystem is not this host's to bind (a remote engine, or a
    storage driver without a merged directory). `scratch` is the grader's, for its /etc."""
    data = (container.inspected.get("GraphDriver") or {}).get("Data") or {}
    merged = Path(data.get("MergedDir") or "/nonexistent")
    cgroup = container.cgroup
    if cgroup is None or not container.init_pid or not merged.is_dir():
        return None
    mounts = _mounts(container.inspected)
    config = container.inspected.get("Config") or {}
    env = dict(item.split("=", 1) for item in config.get("Env") or () if "=" in item)
    fds: list[int] = []
    try:
        root, watched, refused = _one_root(merged, mounts, container.changes, fds)
        root += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run", "--tmpfs", "/sys"]
        root += ["--tmpfs", "/logs", *_bwrap.cgroup_view(cgroup.dirs)]
        notes = _volumes_and_logs(merged, mounts, root, fds)
        layers = [Path(d) for d in (data.get("LowerDir") or "").split(":") if d]
        notes += _etc(merged, scratch / "etc", container, layers)
        root += ["--bind", str(scratch / "etc"), "/etc"]
        notes += _python_hooks(merged, container.changes, layers, root)
        prelude = _shim(container.shim, root)
        home = PurePosixPath(env.get("HOME") or "/root")
        home_files = shell_start_up(lambda name: _image_bytes(layers, home / name))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    pid = container.init_pid
    return GraderView(
        root=root,
        network=Path(f"/proc/{pid}/ns/net"),
        processes=Path(f"/proc/{pid}/ns/pid"),
        cgroup_procs=cgroup.procs_files(),
        held=cgroup.held,
        env=env,
        workdir=container.workdir,
        hostname=str(config.get("Hostname") or "sandbox"),
        capabilities=DEFAULT_CAPABILITIES,
        fds=fds,
        leftovers=_processes.left_running(cgroup.pids(), net_pid=pid, init=pid),
        notes=tuple(notes),
        prelude=prelude,
        linked=lambda: refused or _now_linked(merged, root, watched),
        home_files=home_files,
        writable_root=True,
        top=(merged, watched | TOP_CONFIG, watched),
        refused=tuple(refused),
    )


def _image_bytes(layers: list[Path], path: PurePosixPath) -> bytes | None:
    original = _in_image(layers, path)
    with contextlib.suppress(OSError):
        return original.read_bytes() if original is not None else None
    return None


def _mounts(inspected: Mapping[str, Any]) -> list[tuple[PurePosixPath, str, bool]]:
    """The container's volumes and binds the grader needs, shallowest first. Left out: what
    lives under /run (a prepared agent's tree) and the uv shim's binds (the grader has its own)."""
    found = []
    for m in inspected.get("Mounts") or ():
        if not m.get("Source") or not m.get("Destination"):
            continue
        dest = PurePosixPath(m["Destination"])
        if dest.is_relative_to("/run") or dest.is_relative_to(SHIM):
            continue
        found.append((dest, str(m["Source"]), bool(m.get("RW", True))))
    return sorted(found, key=lambda m: len(m[0].parts))


def _one_root(
    merged: Path,
    mounts: Sequence[tuple[PurePosixPath, str, bool]],
    changes: list[tuple[str, int]] | None,
    fds: list[int],
) -> tuple[list[str], frozenset[str], list[str]]:
    """The container's root as one mount (a rename from /app to /tmp works, as in the
    container), the grader's own folders made on it where missing, and the test runners'
    configuration the agent put at its top covered. Returns bubblewrap's arguments, the folders
    at the top the grader mounts on (the watch guards them, and the configuration's names), and
    what the agent put there that the grader cannot start over."""
    fd = os.open(merged, O_PATH_DIR)
    fds.append(fd)
    own = set(MOUNTED_TOP) | {dest.parts[1] for dest, _, _ in mounts if len(dest.parts) == 2}
    refused = [f"/{name}" for name in sorted(own) if not _top_folder(fd, name)]
    root = ["--bind-fd", str(fd), "/"]
    added = {path for path, kind in changes or () if kind in (CHANGED, ADDED)}
    for name in sorted(TOP_CONFIG):
        if f"/{name}" not in added:
            continue  # the image's own, or none: the tests meet what the task shipped
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            refused.append(f"/{name}")
        elif stat.S_ISDIR(mode):
            root += ["--tmpfs", f"/{name}"]
        else:
            root += ["--ro-bind", "/dev/null", f"/{name}"]
    return root, frozenset(own), refused


def _top_folder(root_fd: int, name: str) -> bool:
    """`name` at the top of the container's root is a folder (made here where missing, so that
    no mount point comes to be while the watch stands), never a link."""
    with contextlib.suppress(OSError):  # there already, most often
        os.mkdir(name, 0o755, dir_fd=root_fd)
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _volumes_and_logs(
    merged: Path,
    mounts: Sequence[tuple[PurePosixPath, str, bool]],
    root: list[str],
    fds: list[int],
) -> list[str]:
    """The container's volumes at their places, but /logs: of it the grader sees the agent's
    own log folders only, by descriptor; its /logs/verifier is the grader's own. A volume inside
    a folder of the agent's is bound only while no link stands on its way."""
    logs_base, notes = merged / "logs", []
    for dest, source, rw in mounts:
        if dest == LOGS:
            logs_base = Path(source)
        elif LOGS in dest.parents:
            continue
        elif len(dest.parts) > 2 and _linked(merged, dest):
            notes.append(f"{dest} not shown to the grader: the agent put a link on its way")
        else:
            root += ["--bind" if rw else "--ro-bind", source, str(dest)]
    return notes + bind_agent_logs(logs_base, root, fds)


def _linked(merged: Path, dest: PurePosixPath, itself: bool = False) -> bool:
    """Whether a folder on the way to `dest` (or, with `itself`, `dest`) is a link."""
    path = merged
    for part in dest.parts[1:] if itself else dest.parts[1:-1]:
        path = path / part
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return True
    return False


def _shim(shim: tuple[Path, Path] | None, root: list[str]) -> str:
    if shim is None:
        return ""
    uv, python = GRADER_SHIM / "uv", GRADER_SHIM / "python"
    root += ["--ro-bind", str(shim[0]), str(uv), "--ro-bind", str(shim[1]), str(python)]
    return _offline.uv_shim_install(str(uv), str(python))


def _etc(merged: Path, dest: Path, container: Container, layers: list[Path]) -> list[str]:
    """The grader's /etc: the container's, copied as grading begins (links kept as links, modes
    kept), with the grader's start-up files taken from the image."""
    try:
        fd = trees.open_dir(merged, PurePosixPath("etc"))
    except OSError:
        dest.mkdir(parents=True, exist_ok=True)
        return ["the container has no /etc folder: the grader's is empty"]
    with trees.closing_fd(fd):
        copied = trees.copy_tree(fd, dest, trees.Copied(budget=ETC_COPY_MAX_BYTES), modes=True)
    for name, content in container.engine_files.items():
        _write(dest, PurePosixPath(name), content)
    notes = [f"not copied into the grader's /etc: {entry}" for entry in copied.listed()]
    return notes + _resets(container.changes, layers, dest)


def _resets(changes: list[tuple[str, int]] | None, layers: list[Path], etc: Path) -> list[str]:
    """The image's own version of each start-up file the agent changed under /etc, and nothing
    for one it added; the programs of a grader's bootstrap it changed, named."""
    if changes is None:
        return ["the engine gave no diff of the container: the grader's /etc is the agent's"]
    reset, named = [], []
    for path, kind in sorted(changes):
        if kind not in (CHANGED, ADDED):
            continue
        how = "changed" if kind == CHANGED else "added"
        if RESET.search(path) and _restore(etc, PurePosixPath(path), layers):
            reset.append(f"{path} ({how})")
        elif BOOTSTRAP.search(path):
            named.append(f"{path} ({how})")
    notes = []
    if reset:
        shown = ", ".join(trees.capped(reset))
        notes.append(f"the grader's start took the image's {shown} in place of the agent's")
    if named:
        shown = ", ".join(trees.capped(named))
        notes.append(f"the grader ran where the agent had changed programs it may run: {shown}")
    return notes


def _restore(etc: Path, path: PurePosixPath, layers: list[Path]) -> bool:
    """In the grader's copy of /etc: the image's file at `path`, or no file where it had none;
    False for a folder (its files come one by one). The copy holds the agent's links: every
    step is taken without following one."""
    rel = PurePosixPath(*path.parts[2:])
    with contextlib.suppress(OSError), trees.closing_fd(trees.open_dir(etc, rel.parent)) as fd:
        if stat.S_ISDIR(os.stat(rel.name, dir_fd=fd, follow_symlinks=False).st_mode):
            return False
    original = _in_image(layers, path)
    if original is None:
        with contextlib.suppress(OSError), trees.closing_fd(trees.open_dir(etc, rel.parent)) as fd:
            os.unlink(rel.name, dir_fd=fd)
        return True
    with contextlib.suppress(OSError):
        _write(etc, rel, original.read_bytes(), stat.S_IMODE(os.lstat(original).st_mode))
    return True


def _write(root: Path, rel: PurePosixPath, content: bytes, mode: int = 0o644) -> None:
    """`content` at `root/rel`, replacing whatever is there, never through a link."""
    with (
        contextlib.suppress(OSError),
        trees.closing_fd(trees.open_dir(root, rel.parent, replace=True)) as fd,
    ):
        trees.remove_entry(fd, rel.name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(rel.name, flags, mode, dir_fd=fd), "wb") as out:
            out.write(content)


def _python_hooks(
    merged: Path, changes: list[tuple[str, int]] | None, layers: list[Path], root: list[str]
) -> list[str]:
    """Python's start-up hooks the agent added or changed outside the grader's /etc, unless a
    package it installed lists them (an editable install's .pth, setuptools' own): hidden from
    the grader when added, the image's when changed. Bound over the agent's folders, so only
    while no link stands on the way."""
    hidden, kept = [], []
    for path, kind in sorted(changes or ()):
        found = PYTHON_HOOK.search(path)
        if kind not in (CHANGED, ADDED) or (found is None and not STDLIB.search(path)):
            continue
        dest = PurePosixPath(path)
        if not _is_plain_file(merged, dest):
            continue
        if found is not None and _listed(merged, dest, PurePosixPath(found["site"])):
            continue
        if found is None and kind == ADDED and not _image_python(layers, dest):
            continue  # a Python the agent installed (apt, a build): its library is its own
        if _linked(merged, dest):
            kept.append(f"{path} (a link on its way)")
            continue
        if len(hidden) >= MAX_HIDDEN:
            kept.append(f"{path} (more than {MAX_HIDDEN} files to leave out)")
            continue
        original = _in_image(layers, dest) if kind == CHANGED else None
        root += ["--ro-bind", str(original) if original else "/dev/null", path]
        hidden.append(f"{path} ({'changed' if kind == CHANGED else 'added'})")
    notes = []
    if hidden:
        notes.append(f"Python start-up hooks and standard library files of the agent's not run "
                     f"by the grader (the image's, or none, in their place): "
                     f"{', '.join(trees.capped(hidden))}")  # fmt: skip
    if kept:
        notes.append(f"Python start-up hooks of the agent's the grader could not leave out: "
                     f"{', '.join(trees.capped(kept))}")  # fmt: skip
    return notes


def _listed(merged: Path, dest: PurePosixPath, site: PurePosixPath) -> bool:
    """A .pth a package the agent installed lists in its RECORD (an editable install's): kept,
    as the tests may import that package. A sitecustomize is no package's, whatever a RECORD
    says (the agent writes RECORDs too)."""
    rel = dest.relative_to(site)
    if rel.parts[0].partition(".")[0] in START_UP:
        return False
    return str(rel) in _installed(merged, site)


def _image_python(layers: list[Path], dest: PurePosixPath) -> bool:
    """Whether the image has the standard library `dest` is added to (its os.py); pip.conf
    under a prefix counts as the image's Python's."""
    parts = dest.parts
    if dest.name == "pip.conf" and len(parts) <= 4:
        return True
    at = next((i for i, part in enumerate(parts) if part.startswith("python3")), None)
    if at is None:
        return False
    return _in_image(layers, PurePosixPath(*parts[: at + 1], "os.py")) is not None


def _is_plain_file(merged: Path, dest: PurePosixPath) -> bool:
    try:
        return stat.S_ISREG(os.lstat(merged / PurePosixPath(*dest.parts[1:])).st_mode)
    except OSError:
        return False


def _installed(merged: Path, site: PurePosixPath) -> set[str]:
    """What the packages in a site folder say they installed there (their RECORD files, or an
    egg's installed-files.txt), as paths relative to the folder."""
    listed: set[str] = set()
    rel = PurePosixPath(*site.parts[1:])
    try:
        fd = trees.open_dir(merged, rel)
    except OSError:
        return listed
    with trees.closing_fd(fd):
        names = os.listdir(fd)
    for name in names:
        record = "RECORD" if name.endswith(".dist-info") else "installed-files.txt"
        if not name.endswith((".dist-info", ".egg-info")):
            continue
        found = trees.read_entry(merged, rel / name / record, max_bytes=RECORD_MAX_BYTES)
        base = PurePosixPath(name) if record == "installed-files.txt" else PurePosixPath(".")
        for line in (found.data or b"").decode(errors="replace").splitlines():
            entry = line.split(",")[0].strip()
            if entry:
                listed.add(os.path.normpath(str(base / entry)))
    return listed


def _now_linked(merged: Path, root: list[str], top: frozenset[str]) -> list[str]:
    """After the grader failed to start: which of its mount points in the agent's folders now
    are, or have on their way, a link (the agent's doing, racing the grader's start)."""
    binds = ("--bind", "--ro-bind", "--tmpfs")
    dests = {PurePosixPath(root[i + (1 if a == "--tmpfs" else 2)])
             for i, a in enumerate(root) if a in binds}  # fmt: skip
    dests |= {PurePosixPath("/", name) for name in top}
    return sorted(str(d) for d in dests if len(d.parts) > 1 and _linked(merged, d, itself=True))


def _in_image(layers: list[Path], path: PurePosixPath) -> Path | None:
    """The file at `path` in the image's layers (topmost first), or None where the image had
    none there: absent, deleted by a layer's whiteout, or not a regular file."""
    rel = PurePosixPath(*path.parts[1:])
    for layer in layers:
        candidate = layer / rel
        try:
            mode = os.lstat(candidate)
        except OSError:
            if _opaque_above(layer, rel):
                return None
            continue
        if stat.S_ISCHR(mode.st_mode) and mode.st_rdev == 0:  # overlay's whiteout
            return None
        return candidate if stat.S_ISREG(mode.st_mode) else None
    return None


def _opaque_above(layer: Path, rel: PurePosixPath) -> bool:
    """A folder this layer made opaque hides the same path in every layer below it."""
    for parent in rel.parents:
        if parent == PurePosixPath("."):
            break
        with contextlib.suppress(OSError):
            if os.getxattr(layer / parent, "trusted.overlay.opaque") == b"y":
                return True
    return False
