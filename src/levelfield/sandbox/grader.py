"""The grader stands apart: tests/test.sh runs in namespaces of its own, beside the agent's.

A process the agent leaves running shares the agent's namespaces with anything else started
there. Were the grader started there too, that process could watch for the tests and read the
answers, rename a reward into place while test.sh runs, trace the grader or reach its files
through /proc, and the agent's HOME and environment (a .curlrc, a usercustomize.py, a PATH)
would shape the grader's own start. So the verifier phase is a second bubblewrap, started on the
host, beside the agent's sandbox:

- a PID namespace of its own, a sibling of the agent's (a child of the host's): the agent's
  processes cannot see, signal or trace the grader's, nor reach its files through /proc;
- a mount namespace of its own: /tests, the grader's /logs/verifier, its HOME and its TMPDIR
  come from the grader's disk, which no mount of the agent's holds. The agent's work state (its
  workdir, /tmp, /root, and on oci the whole filesystem it changed) is bound in as it is, since
  that is what the grader checks;
- the sandbox's network namespace: a service the task asked to be left running answers the
  grader on the sandbox's network, its loopback included;
- the trial's cgroup: the ceilings hold through grading, as they do in a container;
- a clean start: an environment made by the harness (the image's, or the host userland's base),
  never the agent's; a fresh HOME and TMPDIR; a default container's capabilities with
  no-new-privileges. The backend resets what else the agent could have shaped (`GraderView`).

While it runs, the witness (`_witness.py`) names every process that opens or writes the grader's
disk and refuses any that is not the grader's. When test.sh ends its PID namespace ends with it,
so nothing the grader started (nor anything started by the agent's code it ran) outlives it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from levelfield.errors import SandboxStartError
from levelfield.masking import Masker
from levelfield.records import PhaseResult
from levelfield.sandbox import (
    GraderView,
    Sandbox,
    _held_apart,
    _output,
    _processes,
    _seccomp,
    _signals,
    _top_watch,
    _witness,
    cgroups,
    disks,
    trees,
)

TESTS = PurePosixPath("/tests")
VERIFIER = PurePosixPath("/logs/verifier")
HOME = PurePosixPath("/run/levelfield-grader/home")
TMPDIR = PurePosixPath("/run/levelfield-grader/tmp")
# The grader's Python's bytecode cache prefix: a folder of the trial's beside the grader's disk,
# not on it, so that an import is not an open the witness must answer (Python opens a cached
# module at every start: on a busy host the round trips made a test's program miss its 0.5 s).
BYTECODE = PurePosixPath("/run/levelfield-grader/bytecode")
BYTECODE_DIR = "grader-bytecode"
# Its own sparse disk: the code under test runs in the grader and may write anything there, and a
# host folder would take it uncapped. Full, it costs speed only: Python then caches nothing.
BYTECODE_BYTES = 256 << 20
# Where each grader path lives on its disk, and with which mode.
LAYOUT = {TESTS: ("tests", 0o755), VERIFIER: ("verifier", 0o755), HOME: ("home", 0o700),
          TMPDIR: ("tmp", 0o1777)}  # fmt: skip
IN_SANDBOX = (
    "the grader ran in the agent's sandbox (this backend cannot start it apart here): a process "
    "the agent left running shared it"
)


def filled_beside(leftovers: int) -> str:
    """Why a trial disk that filled while the grader ran, with `leftovers` processes of the
    agent's writing beside it (they share the agent's work state, which the grader checks), is
    no evidence outside the agent's reach that the ceiling, rather than the agent, ended the
    tests: the note on every backend and every harness that drives the phases."""
    return (
        "the trial's disk filled while the grader ran, with processes the agent left running "
        f"beside it ({leftovers}): whose writes filled it cannot be told apart, "
        "so the full disk does not make this trial an infra error"
    )


SCRATCH = "view"  # what a backend builds the grader's view from (oci: its /etc)
# Sparse: the grader's downloads (uv, a CPython, pytest) take real space only as written.
DISK_BYTES = 8 << 30
MIN_NOTED_CPU_S = 0.2  # the agent's CPU while grading, named in the evidence from this much


class Grader:
    """The grader's disk, its witness, and test.sh run in the grader's namespaces."""

    def __init__(self, view: GraderView, disk: Path, image: Path, secrets: Masker) -> None:
        self.view, self.disk, self.image, self.secrets = view, disk, image, secrets
        self._intrusions: list[str] = []
        self._notes: list[str] = list(view.notes)
        self.setup_failure: str | None = None  # bubblewrap's words when the view failed to form
        self.agent_cpu_s = 0.0  # what the agent's processes took of the CPU while it ran
        self.grader_cpu_s = 0.0  # and what its own took
        self._running: set[subprocess.Popen[bytes]] = set()
        self._prelude = view.prelude  # not run yet
        self._lock = threading.Lock()
        self._holding = 0  # runs under way that hold the agent's processes apart
        self._hold: _held_apart.HeldApart | None = None

    @classmethod
    def start(cls, box: Sandbox, trial_dir: Path) -> Grader | None:
        """The grader's disk, and the sandbox's view for it; None (and no disk) where the
        backend cannot start the grader apart."""
        disk, image = trial_dir / "grader", trial_dir / "grader.img"
        disk.mkdir(parents=True, exist_ok=True)
        disks.mount_ext4(image, disk, DISK_BYTES)
        try:
            for name, mode in LAYOUT.values():
                (disk / name).mkdir(exist_ok=True)
                (disk / name).chmod(mode)
            (disk / SCRATCH).mkdir(mode=0o700, exist_ok=True)
            view = box.grader_view(disk / SCRATCH)
            if view is not None:
                _seed_home(disk / LAYOUT[HOME][0], view.home_files)
            _bytecode_dir(disk.with_name(BYTECODE_DIR))
        except BaseException:
            _release(disk, image)
            raise
        if view is None:
            _release(disk, image)
            return None
        return cls(view, disk, image, box.secrets)

    # -- files ------------------------------------------------------------------------------

    def owns(self, path: PurePosixPath) -> bool:
        return any(path == p or p in path.parents for p in (TESTS, VERIFIER))

    def split(self, path: PurePosixPath) -> tuple[Path, PurePosixPath]:
        for inside, (name, _) in LAYOUT.items():
            if path == inside or inside in path.parents:
                return self.disk / name, PurePosixPath(path.relative_to(inside))
        raise SandboxStartError(f"{path} is not the grader's")

    def copy_in(self, src: Path, dest: PurePosixPath, *, merge: bool = False) -> None:
        trees.copy_in(src, *self.split(dest), merge=merge)

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry:
        return trees.read_entry(*self.split(path), max_bytes=max_bytes)

    def digests(self, path: PurePosixPath) -> dict[str, str]:
        return trees.digests(*self.split(path))

    def keep_logs(self, dest: Path) -> tuple[str, ...]:
        """The grader's /logs/verifier, copied by the rules for anything a sandbox wrote (the
        tests run the agent's code): what was not copied is returned."""
        root, rel = self.split(VERIFIER)
        try:
            fd = trees.open_dir(root, rel)
        except OSError:
            return ()
        with trees.closing_fd(fd):
            return trees.copy_tree(fd, dest).listed()

    # -- running ----------------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        timeout_s: float,
        log_path: Path,
        env: dict[str, str] | None = None,
    ) -> PhaseResult:
        """test.sh in the grader's namespaces, under the witness; its namespace ends with it.
        `env`: what the task itself gives its verifier (Harbor's `verifier.env`), over the clean
        start, never the agent's."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = _output.log_size(log_path)
        if self.view.refused:
            return self._refused(log_path)
        command = self._first(command)
        witness = self._witness()
        watch = self._top_watch()
        block_read, block_write = os.pipe()
        try:
            with self._agent_held_apart() as held:
                # Where the hold stands the kernel counts each side; else /proc is sampled.
                sampled = (
                    None
                    if held
                    else _processes.AgentCpu(self.view.cgroup_procs, self.view.processes)
                )
                with sampled or contextlib.nullcontext():
                    result = self._spawn_and_wait(
                        command, timeout_s, log_path, env, (block_read, block_write), witness
                    )
            self._note_agent_cpu(held, sampled)
        finally:
            for fd in (block_read, block_write):
                with contextlib.suppress(OSError):
                    os.close(fd)
            if witness is not None:
                witness.stop()
                self._intrusions += witness.intrusions()
                self._notes += witness.notes()
            if watch is not None:
                self._intrusions += watch.stop()
        code, timed_out, duration_s, set_up = result
        if not set_up:
            self.setup_failure = _last_words(log_path, offset)
        return PhaseResult(
            exit_code=None if timed_out else _output.shell_exit_code(code),
            signal=None if timed_out else _output.signal_of_returncode(code),
            timed_out=timed_out,
            duration_s=duration_s,
            output_tail=_output.tail(log_path, offset=offset),
        )

    @contextlib.contextmanager
    def _agent_held_apart(self) -> Iterator[_held_apart.HeldApart | None]:
        """The agent's processes in a cgroup of the least CPU weight while test.sh runs
        (_held_apart.py); None where they cannot be, or another run of this grader holds them
        already (a harness's grader may run commands side by side)."""
        with self._lock:
            first = self._holding == 0
            self._holding += 1
            if first:
                self._hold = _held_apart.HeldApart(self.view.cgroup_procs, self.view.held)
                try:
                    self._hold.hold()
                except _held_apart.HoldFailed as exc:
                    self._hold = None
                    if str(exc) not in self._notes:
                        self._notes.append(str(exc))
        try:
            yield self._hold if first else None
        finally:
            with self._lock:
                self._holding -= 1
                if self._holding == 0 and self._hold is not None:
                    self._hold.release()

    def _note_agent_cpu(
        self, held: _held_apart.HeldApart | None, sampled: _processes.AgentCpu | None
    ) -> None:
        if held is not None:
            agent, grader = held.agent_cpu_s, held.grader_cpu_s
        else:
            assert sampled is not None  # made wherever there is no hold
            agent, grader = sampled.seconds, sampled.others_seconds
        self.agent_cpu_s += agent
        self.grader_cpu_s += grader
        if held:
            self._notes += held.notes
        if held and self.view.leftovers:
            self._notes.append(
                f"{held.moved} processes the agent left were held in a cgroup of the least CPU "
                "weight, within a tenth of the trial's CPU ceiling and within what the agent had "
                "left of its memory and pids ceilings, while the grader ran with those ceilings "
                f"of its own: they took {agent:.1f} s of CPU (the grader "
                f"{grader:.1f} s), as the kernel counted{_befell(held)}"
            )
        elif not held and agent >= MIN_NOTED_CPU_S:
            self._notes.append(
                f"the agent's processes took {agent:.1f} s of CPU while the grader ran "
                f"(the grader {grader:.1f} s), within the trial's CPU ceiling that the grader "
                "shares"
            )

    def _spawn_and_wait(
        self,
        command: str,
        timeout_s: float,
        log_path: Path,
        env: dict[str, str] | None,
        block: tuple[int, int],
        witness: _witness.Witness | None,
    ) -> tuple[int, bool, float, bool]:
        """(return code, timed out, seconds, whether bubblewrap got as far as test.sh). `block`:
        the pipe whose one byte lets bubblewrap start test.sh, once the witness knows it."""
        block_read, block_write = block
        out_read, out_write = os.pipe()
        pump = _output.LogPump(out_read, log_path, self.secrets)
        started = time.monotonic()
        profile = self._profile()
        try:
            proc = subprocess.Popen(
                self.argv(command, block_fd=block_read, seccomp_fd=profile),
                stdin=subprocess.DEVNULL,
                stdout=out_write,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(block_read, *self.view.fds, *([profile] if profile >= 0 else [])),
                env={**self.environment(), **(env or {})},
            )
        finally:
            os.close(out_write)  # the pump ends at the pipe's end, started or not
            if profile >= 0:
                os.close(profile)
        with self._lock:
            self._running.add(proc)
        if witness is not None:
            witness.allow(proc.pid)  # before anything in it may open the grader's files
        with contextlib.suppress(OSError):
            os.write(block_write, b"x")  # bubblewrap reads one byte, then starts test.sh
        try:
            timed_out = _output.wait_or_kill(proc, timeout_s)
        finally:
            with self._lock:
                self._running.discard(proc)
        pump.drain(_output.CLOSE_S)  # the namespace is gone: so is every writer
        return proc.returncode, timed_out, time.monotonic() - started, not _unread(block_read)

    def _first(self, command: str) -> str:
        """The view's prelude (the uv shim's links into the grader's HOME) comes with the first
        command the grader runs; a harness's grader may run several."""
        with self._lock:
            prelude, self._prelude = self._prelude, ""
        if not prelude:
            return command
        failed = "echo 'levelfield: the prelude of the grader failed' >&2"
        return f"(\n{prelude}\n) || {failed}\n{command}"

    def _profile(self) -> int:
        """The seccomp profile every phase of the trial runs under (Docker's default, as
        `_seccomp` writes it), for bubblewrap to load right before test.sh; -1 where it cannot
        be compiled here (the trial's notes say so)."""
        try:
            return _seccomp.open_filter()
        except (_seccomp.SeccompUnavailable, OSError) as exc:
            note = f"the grader ran without the seccomp profile: {exc}"
            if note not in self._notes:
                self._notes.append(note)
            return -1

    def argv(self, command: str, *, block_fd: int, seccomp_fd: int = -1) -> list[str]:
        view = self.view
        caps = [arg for cap in view.capabilities for arg in ("--cap-add", f"CAP_{cap.upper()}")]
        argv = [
            _tool("nsenter"),
            f"--net={view.network}",
            "--",
            _tool("bwrap"),
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--hostname",
            view.hostname,
            "--cap-drop",
            "ALL",
            *caps,
            *view.root,
        ]
        for inside, (name, _) in LAYOUT.items():
            argv += ["--bind", str(self.disk / name), str(inside)]
        argv += ["--bind", str(self.disk.with_name(BYTECODE_DIR)), str(BYTECODE)]
        if not view.writable_root:  # a test may make a folder at the top, as in a container
            argv += ["--remount-ro", "/"]
        argv += ["--chdir", str(view.workdir)]
        if seccomp_fd >= 0:
            argv += ["--seccomp", str(seccomp_fd)]
        argv += ["--block-fd", str(block_fd), "--", "bash", "-c", command]
        hold = self._hold
        joins = hold.joins if hold is not None else view.cgroup_procs
        return _signals.default_argv(cgroups.joined(joins, argv))

    def environment(self) -> dict[str, str]:
        """The view's, in the grader's HOME and TMPDIR. Python's output unbuffered: what a test
        runner printed before the code under test ended it (pytest's header, written before it
        imports a single test) is then in the log, where the verdict reads that the tests had
        started; buffered, an `os._exit` in an imported module would take it along. Bytecode
        is cached in a folder of the grader's own (BYTECODE): Python trusts a .pyc whose header
        names its source's size and time, and the agent can write one beside any module. uv reads no
        configuration file (a project's uv.toml or pyproject.toml where test.sh runs uvx, which
        could name an index a leftover of the agent's serves): the grader's uv is configured by
        the environment alone, with the system's certificates as the uv shim sets them."""
        return {
            **self.view.env,
            "HOME": str(HOME),
            "TMPDIR": str(TMPDIR),
            "PYTHONUNBUFFERED": "1",
            "PYTHONPYCACHEPREFIX": str(BYTECODE),
            "UV_NO_CONFIG": "1",
            "UV_NATIVE_TLS": "1",
        }

    def _refused(self, log_path: Path) -> PhaseResult:
        """The agent put a link where the grader mounts its own: test.sh is not started."""
        why = f"a link stands where it mounts its own: {', '.join(self.view.refused)}"
        said = f"levelfield: the grader did not start: {why}"
        with log_path.open("a") as log:
            log.write(said + "\n")
        self.setup_failure = why
        return PhaseResult(exit_code=None, signal=None, timed_out=False, duration_s=0.0,
                           output_tail=said)  # fmt: skip

    def _top_watch(self) -> _top_watch.TopWatch | None:
        if self.view.top is None:
            return None
        watch = _top_watch.TopWatch(*self.view.top)
        watch.start()
        if watch.unavailable:
            self._notes.append(f"the grader ran without the watch on its mount points: "
                               f"{watch.unavailable}")  # fmt: skip
            return None
        return watch

    def _witness(self) -> _witness.Witness | None:
        names = {name: str(inside) for inside, (name, _) in LAYOUT.items()}
        witness = _witness.Witness(self.disk, names, agents=self.view.processes)
        try:
            witness.start()
        except _witness.WitnessUnavailable as exc:
            self._notes.append(f"the grader ran without its witness: {exc.strerror}")
            return None
        return witness

    def cancel(self) -> None:
        """Kill every run in flight (a harness cancelled its exec): each namespace ends with
        its bubblewrap."""
        with self._lock:
            running = list(self._running)
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    # -- what it found ----------------------------------------------------------------------

    def intrusions(self) -> list[str]:
        """Processes not the grader's that touched its files (the agent's doing)."""
        return list(self._intrusions)

    def notes(self) -> list[str]:
        return list(self._notes)

    def close(self) -> None:
        self.view.close()
        _release(self.disk, self.image)


def _unread(fd: int) -> bool:
    """Whether the byte that releases test.sh is still in its pipe: bubblewrap ended before it
    was done setting up the grader's namespaces."""
    os.set_blocking(fd, False)
    try:
        return bool(os.read(fd, 1))
    except OSError:
        return False


def _last_words(log_path: Path, offset: int) -> str:
    said = [line for line in _output.tail(log_path, offset=offset).splitlines() if line.strip()]
    setup = [line for line in said if line.startswith("bwrap:")]
    return ((setup or said or ["no output"])[-1]).strip()[:300]


def _release(disk: Path, image: Path) -> None:
    bytecode = disk.with_name(BYTECODE_DIR)
    for folder, its_image in ((disk, image), (bytecode, _image_of(bytecode))):
        disks.unmount(folder)
        its_image.unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)


def _tool(name: str) -> str:
    """The host's own nsenter and bwrap (the environment's PATH is the sandbox's)."""
    found = shutil.which(name, path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    if found is None:
        raise SandboxStartError(f"{name} not found on the host: the grader needs it")
    return found


def _bytecode_dir(prefix: Path) -> None:
    """Empty (a killed run's is never this trial's to trust), on a disk of its own (unwitnessed:
    each import would wait on the witness), and writable by whichever user the tests run as,
    like a TMPDIR."""
    disks.unmount(prefix)
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.mkdir()
    disks.mount_ext4(_image_of(prefix), prefix, BYTECODE_BYTES)
    prefix.chmod(0o1777)
    shutil.rmtree(prefix / "lost+found", ignore_errors=True)


def _image_of(folder: Path) -> Path:
    return folder.with_name(f"{folder.name}.img")


def _befell(held: _held_apart.HeldApart) -> str:
    """What the kernel did among the held at their bound: theirs, not the grader's."""
    said = []
    if held.oom_kills:
        said.append(f"the kernel OOM-killed {held.oom_kills} of them at that bound")
    if held.pids_max_hits:
        said.append(f"refused their forks {held.pids_max_hits} times at theirs")
    return "; " + " and ".join(said) + " (theirs, not the grader's)" if said else ""


def _seed_home(home: Path, files: Mapping[str, bytes]) -> None:
    """The grader's fresh HOME holds the image's shell start-up files: a login shell a test
    starts (tmux, expect) reads .profile, which reads .bashrc, as in the image."""
    for name, content in files.items():
        if "/" not in name and name not in ("", ".", ".."):
            (home / name).write_bytes(content)
