"""The started trial container of the `oci` backend: every phase is an exec in it.

Evidence is read from the container's own cgroup directories (the same readers as the process
backend), with the engine's own word on an OOM kill beside it (its flag and `oom` events, asked in
every trial) and the kernel log's (`_kernel_oom.py`, which names the container and whose limit
was hit), the storage disk's fill level from the host when the ceiling lives on one
(`_layer_disk.py`), and the free space of the engine's own disk beside the writable layer. Where the
container's cgroup is not this host's to read (a remote engine, a harness in a container), the
engine's events and the kernel log, when it ran here, are the only OOM evidence. Kept apart from
the backend (`__init__.py`), which creates it, so that each reads as one concept.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from levelfield.errors import SandboxDied
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.records import Evidence, ImageRecord, PhaseResult
from levelfield.sandbox import (
    GraderView,
    Observables,
    Usage,
    _kernel_oom,
    _logcap,
    _netns,
    _output,
    archives,
    cgroups,
    disks,
    trees,
)
from levelfield.sandbox.oci import (
    _changes,
    _container,
    _engine,
    _grader,
    _layer_disk,
    _offline,
)
from levelfield.tasks import Task

LOG_DIRS = ("logs", "logs/agent", "logs/verifier", "logs/artifacts")
TESTS = PurePosixPath("/tests")  # what the verifier checks from outside once copied in
RENEW_ATTEMPTS = 3  # archives of a folder the agent may be rewriting, before it is let go


@dataclass(slots=True)
class _Snapshot:
    """The last counters read while the container's cgroup existed: an OOM kill of the init
    takes the container, and its cgroup, with it."""

    counters: cgroups.Counters = field(default_factory=cgroups.Counters)
    engine_oom_killed: bool = False


@dataclass(frozen=True, slots=True)
class _Archived:
    tar: tarfile.TarFile
    kind: str  # what the path itself is (trees.Entry.kind)
    target: str  # a link's target


class OciSandbox:
    """A started trial container; every phase is an exec in it."""

    def __init__(
        self,
        client: Any,
        container_id: str,
        task: Task,
        limits: Limits,
        notes: list[str],
        disk: _layer_disk.LayerDisk | None = None,
    ) -> None:
        self.client, self.api = client, client.api
        self.container_id, self.task, self.limits = container_id, task, limits
        self.notes = notes
        inspected = self.api.inspect_container(container_id)
        self.init_pid = int(inspected["State"].get("Pid") or 0)
        self.cgroup = _container.container_cgroup(self.init_pid, container_id)
        if self.cgroup is None:
            notes.append(
                "container cgroup not readable from this host: OOM evidence from the engine's "
                "oom events and, where this host's kernel ran it, the kernel log"
            )
        else:
            self._weigh_for_the_floor(notes)
        self.kernel = _kernel_oom.KernelOomWatch()  # OOM kills, whoever's limit, from now on
        self.disk = disk  # the storage ceiling, when the writable layer lives on one
        # The engine's own disk: beside the layer when the layer is on the trial's disk.
        watched = disk.layer.parent if disk is not None else _upper_dir(inspected)
        self.host_disk = disks.HostDiskWatch(watched if self.cgroup else None)
        # With the engine's quota (StorageOpt size=) the writable layer is the trial's own disk,
        # and statvfs there reads the quota: its running out is the trial's ceiling.
        self._layer_capped = bool((inspected.get("HostConfig") or {}).get("StorageOpt"))
        self._sigkilled = False  # a phase died by SIGKILL: an OOM kill the engine may confirm
        self._snapshot = _Snapshot()
        self._created_s = time.time() - 1.0  # events are asked for from here on
        self._closed = False
        self._uv_shim = False
        self.shim: tuple[Path, Path] | None = None  # the uv shim (set by the backend)
        self._engine_files: dict[str, bytes] = {}
        self.image: ImageRecord | None = None
        self.network: _netns.TrialNetwork | None = None  # its sealed link, when it has network
        self.secrets = Masker()  # masked in every log as written (the trial's)
        self.logs = _logcap.LogCaps()  # each log capped, its cut noted in the evidence
        self._storage_full = False
        self._inodes_out: str | None = None  # the ceiling's disk ran out of inodes, said
        self._storage_peak = 0

    def _weigh_for_the_floor(self, notes: list[str]) -> None:
        assert self.cgroup is not None
        try:
            parent = self.cgroup.weigh_engine_parent()
        except OSError as exc:  # the floor is then the engine's: said, the trial goes on
            notes.append(f"cpu floor: the engine's parent cgroup could not be weighed: {exc}")
            return
        if parent is None:
            notes.append(
                "cpu floor: shares among the containers' parent "
                f"{self.cgroup.dirs.get('cpu', self.cgroup.dirs.get('unified'))}'s siblings, "
                "a parent levelfield leaves as the engine set it"
            )

    def prepare(self, *, uv_shim: bool) -> None:
        """Create /logs/{agent,verifier,artifacts}, as Harbor's mounts would, and keep the
        engine's /etc/hosts and /etc/resolv.conf as they are before the agent runs."""
        self.api.put_archive(self.container_id, "/", _container.dirs_tar(LOG_DIRS))
        self._uv_shim = uv_shim
        if self.cgroup is not None:
            inspected = self.api.inspect_container(self.container_id)
            self._engine_files = _grader.snapshot_engine_files(inspected)

    def grader_view(self, scratch: Path) -> GraderView | None:
        """The container's filesystem, entered from this host (`_grader.py`)."""
        self._require_alive()
        container = _grader.Container(
            inspected=self.api.inspect_container(self.container_id),
            init_pid=self.init_pid,
            cgroup=self.cgroup,
            workdir=self.task.workdir,
            engine_files=self._engine_files,
            changes=self.changes(),
            shim=self.shim if self._uv_shim else None,
        )
        return _grader.grader_view(container, scratch)

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> PhaseResult:
        """Run `command` with bash in the WORKDIR; kill its process group at the timeout."""
        self._require_alive()
        started = time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = _output.log_size(log_path)
        try:
            exec_id = self.api.exec_create(
                self.container_id,
                ["bash", "-c", command],
                workdir=str(self.task.workdir),
                environment=dict(env or {}),
            )["Id"]
            sink = self.logs.open(log_path)
            log = self.secrets.writer(sink)
            try:
                timed_out = _container.run_exec(self.api, exec_id, log, timeout_s)
            finally:
                log.close()
                sink.close()
            code = self.api.exec_inspect(exec_id).get("ExitCode")
        except Exception as exc:
            self._require_alive()
            raise SandboxDied(f"exec in {self.container_id[:12]} failed: {exc}") from exc
        self._remember_counters()
        exit_code = None if timed_out else (int(code) if code is not None else None)
        self._sigkilled |= exit_code == 128 + 9
        return PhaseResult(
            exit_code=exit_code,
            signal=_output.signal_of(exit_code),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            output_tail=_output.tail(log_path, offset=offset),
        )

    def copy_in(self, src: Path, dest: PurePosixPath) -> None:
        """A directory replaces whatever the agent left at `dest`; the uv shim rides with /tests.
        The engine itself makes the directory (its archive holds it): the image's tools are the
        agent's to break, and what reached /tests is checked from outside by the verifier."""
        if src.is_dir():
            self._quiet(["rm", "-rf", "--", str(dest)], check=dest != TESTS)
        else:
            self._quiet(["mkdir", "-p", "--", str(dest.parent)])
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.add(src, arcname=dest.name)  # a directory with all it holds, sorted
        if not self._put(dest.parent, buffer.getvalue()) and dest != TESTS:
            raise SandboxDied(f"copy of {src} to {dest} was refused by the engine")
        if dest == TESTS and self._uv_shim:
            self._quiet(["sh", "-c", _offline.UV_SHIM_INSTALL])

    def _put(self, parent: PurePosixPath, archive: bytes) -> bool:
        """False when the engine refuses (the parent is missing, or not a directory)."""
        import docker.errors

        try:
            return bool(self.api.put_archive(self.container_id, str(parent), archive))
        except docker.errors.APIError:
            self._require_alive()
            return False

    def read_file(self, path: PurePosixPath) -> bytes | None:
        found = self.read_entry(path, max_bytes=trees.READ_MAX_BYTES)
        return found.data if found.kind == "file" else None

    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry:
        """What `path` itself is comes from the engine's stat of it: Podman's archive of a link
        holds the link's target, Docker's the link."""
        with self._fetch(path) as found:
            if found is None:
                return trees.Entry("missing")
            if found.kind != "file":
                return trees.Entry(found.kind, target=found.target)
            return archives.entry(found.tar, max_bytes=max_bytes)

    def digests(self, path: PurePosixPath) -> dict[str, str]:
        """{} when the container is gone: nothing can be said of its files then."""
        with self._fetch(path) as found:
            if found is None:
                return {".": "missing"} if self._state() else {}
            if found.kind == "symlink":
                return {".": f"symlink:{found.target}"}
            return archives.digests(found.tar) if found.kind == "directory" else {".": found.kind}

    def renew_dir(self, path: PurePosixPath, *, keep_in: Path) -> tuple[str, ...]:
        """What the agent left is kept from the engine's archive; the removal runs in the
        container, so the verifier checks from outside that the directory is new and empty."""
        listed: list[str] = []
        for attempt in range(1, RENEW_ATTEMPTS + 1):
            try:
                listed = self._keep(path, keep_in)
                break
            except tarfile.ReadError as exc:  # a file rewritten while the engine archived it
                if attempt == RENEW_ATTEMPTS:
                    listed = [
                        f"what was there ({RENEW_ATTEMPTS} archives of it by the engine were cut "
                        f"short, {exc}, while the agent's processes wrote to it)"
                    ]
        self._quiet(["rm", "-rf", "--", str(path)], check=False)
        parents = [str(PurePosixPath(*path.parts[1 : i + 1])) for i in range(1, len(path.parts))]
        self._put(PurePosixPath("/"), _container.dirs_tar(tuple(parents)))  # /logs, /logs/verifier
        return tuple(listed)

    def _keep(self, path: PurePosixPath, keep_in: Path) -> list[str]:
        with self._fetch(path) as found:
            if found is not None and found.kind == "directory":
                archives.extract(found.tar, keep_in, strip_first=True)
                return archives.inventory(found.tar)
            if found is not None:
                return [f"itself ({trees.Entry(found.kind, target=found.target).describe()})"]
        return []

    @contextlib.contextmanager
    def _fetch(self, path: PurePosixPath) -> Iterator[_Archived | None]:
        """The engine's tar of `path`, spooled to disk (seekable, and never all in memory), with
        what the path itself is by the engine's own stat; None when it does not exist."""
        import docker.errors

        with tempfile.TemporaryFile() as spool:
            try:
                stream, stat = self.api.get_archive(self.container_id, str(path))
                archives.spool(stream, spool)
            except docker.errors.APIError:
                yield None
                return
            spool.seek(0)
            kind = archives.stat_kind(int(stat.get("mode") or 0))
            target = str(stat.get("linkTarget") or "") if kind == "symlink" else ""
            with tarfile.open(fileobj=spool) as tar:
                yield _Archived(tar, kind, target)

    def changes(self) -> list[tuple[str, int]] | None:
        """The engine's diff of the container against its image: (path, kind), kind 0 changed,
        1 added, 2 deleted. What the harness asks when a grader could not run its tools."""
        try:
            return _changes.container_changes(self.api, self.container_id)
        except Exception:  # an engine without the endpoint, or a container already gone
            return None

    def usage(self) -> Usage:
        free, used = self._storage()
        self.host_disk.read()
        if self.cgroup is None:
            return Usage(0, 0.0, used, free)
        reading = self.cgroup.usage()
        self._remember_counters()  # a few µs: keeps them if the container dies with its cgroup
        return Usage(reading.memory_bytes, reading.cpu_usage_s, used, free)

    def _storage(self) -> tuple[int | None, int | None]:
        """The disk's free and used bytes, read from the host as the process backend does."""
        reading = self.disk.free_and_used() if self.disk is not None else None
        if reading is None or self.disk is None:
            return None, None
        free, used = reading
        if self.disk.is_full(free):
            self._storage_full = True
            self._inodes_out = self._inodes_out or self.disk.inodes_out()
        self._storage_peak = max(self._storage_peak, used)
        return free, used

    def is_alive(self) -> bool:
        return bool(self._state().get("Running"))

    def evidence(self) -> Evidence:
        state = self._state()
        alive = bool(state.get("Running"))
        self._storage()
        self.host_disk.read()
        self._remember_counters()
        c = self._snapshot.counters
        blind = self.cgroup is None and self._sigkilled  # a kill no counter here can explain
        self._snapshot.engine_oom_killed |= _engine.engine_saw_oom(
            self.api,
            self.container_id,
            self._created_s,
            state,
            wait=bool(c.oom_kills or state.get("OOMKilled") or blind),
        )
        kills = self.kernel.kills(self.container_id, count_host=self.cgroup is not None)
        kernel_kills = len(kills.own) + len(kills.outside)
        # The engine's flag cannot tell a kill of the agent's held processes from the grader's.
        engine_kill = int(self._snapshot.engine_oom_killed and not c.held_oom_kills)
        oom_kills = max(c.oom_kills, engine_kill, kernel_kills)
        return Evidence(
            oom_kills=oom_kills,
            memory_failcnt=c.memory_failcnt,
            memory_peak_bytes=c.memory_peak_bytes,
            pids_max_hits=c.pids_max_hits,
            cpu_nr_periods=c.cpu_nr_periods,
            cpu_throttled_periods=c.cpu_throttled_periods,
            cpu_throttled_s=c.cpu_throttled_s,
            cpu_usage_s=c.cpu_usage_s,
            storage_used_bytes=self._storage_peak if self.disk is not None else None,
            storage_ceiling_bytes=self.limits.storage_ceiling_bytes,
            storage_full=self._storage_full or (self._layer_capped and self.host_disk.full),
            storage_written_bytes=disks.written_bytes(self.disk.image)
            if self.disk is not None
            else None,
            host_disk_free_min_bytes=self.host_disk.least_free_bytes,
            host_disk_full=self.host_disk.full and not self._layer_capped,
            sandbox_alive=alive,
            engine_oom_killed=self._snapshot.engine_oom_killed,
            host_oom_kills=kills.host_oom_kills,
            outside_oom_kills=len(kills.outside),
            held_oom_kills=c.held_oom_kills,
            held_pids_max_hits=c.held_pids_max_hits,
            notes=(
                *self.notes,
                *kills.notes(),
                *self._unreadable_kill(oom_kills),
                *self.logs.notes(),
                *filter(None, [self._inodes_out]),
            ),
        )

    def _unreadable_kill(self, oom_kills: int) -> list[str]:
        """Where no cgroup can be read, what a SIGKILL with no OOM evidence leaves unknown."""
        if self.cgroup is not None or not self._sigkilled:
            return []
        if oom_kills:
            by = "the engine's oom event" if self._snapshot.engine_oom_killed else "the kernel log"
            return [f"a phase died by SIGKILL, an OOM kill by {by} (it names the container)"]
        return [
            "a phase died by SIGKILL and no OOM evidence can be read here: the engine reported "
            "no oom event (Podman on cgroup v1 never does) and this host's kernel log does not "
            "name the container, so whether the kernel's OOM killer sent it is unknown"
        ]

    def network_namespace(self) -> Path | None:
        """The container's namespace, through its init's pid; None when the engine is remote
        (its processes are not this host's)."""
        path = Path(f"/proc/{self.init_pid}/ns/net")
        return path if self.init_pid and path.exists() else None

    def reaches_outside(self) -> bool:
        return self.network is not None

    def observables(self) -> Observables:
        """The container's init shares its network namespace: its net/dev is the trial's. Only
        when its pid is this host's (the cgroup was found): a remote engine's pid is not."""
        if self.cgroup is None:
            return Observables()
        return Observables(self.init_pid or None, self.cgroup.dirs.get("unified"))

    def collect_logs(self, dest: Path) -> tuple[str, ...]:
        """Copy the container's /logs tree to `dest` (works on a stopped container too): links
        stay links, FIFOs, sockets and devices stay behind. Returns what was not copied. From
        the storage disk on the host when the writable layer lives on one, as the process
        backend does (sparse files stay sparse); else from the engine's archive."""
        dest.mkdir(parents=True, exist_ok=True)
        if self.disk is not None:
            try:
                fd = self.disk.open_written(PurePosixPath("/logs"))
            except OSError:
                return ()
            with trees.closing_fd(fd):
                return trees.copy_tree(fd, dest).listed()
        with self._fetch(PurePosixPath("/logs")) as found:
            if found is None or found.kind != "directory":
                return ()
            return archives.extract(found.tar, dest, strip_first=True).listed()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _layer_disk.remove_container(self.api, self.container_id, self.disk)
        if self.network is not None:
            _netns.destroy(self.network)
        self.kernel.close()

    # -- internals -------------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        import docker.errors

        try:
            return dict(self.api.inspect_container(self.container_id)["State"])
        except docker.errors.NotFound:
            return {}

    def _require_alive(self) -> None:
        state = self._state()
        if not state.get("Running"):
            self._snapshot.engine_oom_killed |= bool(state.get("OOMKilled"))
            status = state.get("Status", "gone") if state else "gone"
            raise SandboxDied(
                f"container {self.container_id[:12]} is {status} "
                f"(exit code {state.get('ExitCode', '?')})"
            )

    def _remember_counters(self) -> None:
        if (
            self.cgroup is not None
            and self.cgroup.dirs[_container.memory_key(self.cgroup)].is_dir()
        ):
            self._snapshot.counters = self.cgroup.counters()

    def _quiet(self, argv: list[str], *, check: bool = True) -> None:
        """A helper command of the harness (mkdir, shim install); its failure is the sandbox's.
        With `check` off, only a dead container is: the caller verifies the result from outside
        (the image's tools are the agent's to break, and that is not the sandbox failing)."""
        self._require_alive()
        exec_id = self.api.exec_create(self.container_id, argv)["Id"]
        output = self.api.exec_start(exec_id)
        code = self.api.exec_inspect(exec_id).get("ExitCode")
        if code != 0 and check:
            text = output.decode(errors="replace").strip()[-500:]
            raise SandboxDied(f"{argv[0]} in the container exited {code}: {text}")


def _upper_dir(inspected: dict[str, Any]) -> Path | None:
    """The container's writable layer on this host (overlay's UpperDir, Docker's and Podman's
    alike): where its uncapped writes land, on the engine's own disk."""
    data = (inspected.get("GraphDriver") or {}).get("Data") or {}
    upper = data.get("UpperDir")
    return Path(upper) if upper and Path(upper).exists() else None
