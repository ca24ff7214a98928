"""The `oci` backend: one container per trial, through the Docker Engine API (Docker or Podman).

Start = the task's image (built from environment/ and cached by content, `_images.py`), a container
created with the limits as Docker and Kubernetes read them (ceiling → Memory = MemorySwap,
NanoCpus, PidsLimit; floor → MemoryReservation, CpuShares = 1024 × CPUs) and an idle init
(`sleep infinity` under the engine's init); every phase is an exec of `bash -c` in the task's
WORKDIR, so background processes the agent starts are still there for the verifier. Evidence is
read from the container's own cgroup directories, never from the engine's state: under cgroup v1
podman reports OOMKilled=false for a container the kernel did OOM-kill. Every object carries
`levelfield.run` and `levelfield.trial` labels, so `reap` finds exactly what a killed run left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from levelfield.errors import HostUnsupported, SandboxDied, SandboxStartError
from levelfield.policy import Limits
from levelfield.records import Evidence, PhaseResult
from levelfield.sandbox import (
    BackendOptions,
    Enforcement,
    ReadOnlyMount,
    Usage,
    _cgroup,
    _container,
    _images,
    _offline,
    _output,
)
from levelfield.tasks import Task

# Where Docker and `podman system service` put their API socket (rootful, then rootless podman).
SOCKET_PATHS = ("/var/run/docker.sock", "/run/podman/podman.sock")
LABEL_RUN = "levelfield.run"
LABEL_TRIAL = "levelfield.trial"
LABEL_TASK = "levelfield.task"
KEEPALIVE = ["sleep", "infinity"]  # Harbor's idle command too; coreutils is in every TB2 base
LOG_DIRS = ("logs", "logs/agent", "logs/verifier", "logs/artifacts")
API_TIMEOUT_S = 120  # one API call (not a phase: phases stream with no socket timeout)
CPU_SHARES_PER_CPU = _cgroup.CPU_SHARES_PER_CPU
NANO_CPUS_PER_CPU = 1_000_000_000


@dataclass(frozen=True, slots=True)
class OciSettings:
    """What the `oci` backend takes beyond the run: the engine and the offline helpers."""

    base_url: str | None = None  # None: DOCKER_HOST, then SOCKET_PATHS
    uv_shim: bool = False  # place uv/uvx (+ CPython 3.13 for `uvx -p 3.13`) with the tests
    cache_dir: Path = _offline.DEFAULT_CACHE_DIR
    storage_quota: bool = True  # try StorageOpt size=; off after the engine refuses it once

    @classmethod
    def from_env(cls) -> OciSettings:
        """For `get_backend("oci", options)`, which passes no settings: LEVELFIELD_UV_SHIM=1,
        LEVELFIELD_CACHE_DIR and DOCKER_HOST configure it until the CLI passes settings."""
        return cls(uv_shim=os.environ.get("LEVELFIELD_UV_SHIM", "") in ("1", "true", "yes"))


@dataclass(frozen=True, slots=True)
class EngineReport:
    """For `levelfield doctor`: which engine answers, and how it runs containers."""

    found: bool
    url: str | None
    engine: str | None = None  # "podman" or "docker"
    version: str | None = None
    api_version: str | None = None
    cgroup_version: str | None = None
    cgroup_driver: str | None = None
    runtime: str | None = None
    problems: tuple[str, ...] = ()

    def describe(self) -> str:
        if not self.found:
            return f"no container engine: {'; '.join(self.problems)}"
        return (
            f"{self.engine} {self.version} (API {self.api_version}) at {self.url}, "
            f"cgroup v{self.cgroup_version} ({self.cgroup_driver}), runtime {self.runtime}"
        )


def find_engine_url() -> str | None:
    """DOCKER_HOST if set, else the first API socket that exists."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    for path in SOCKET_PATHS:
        if Path(path).is_socket():
            return f"unix://{path}"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR")
    if runtime_dir and (Path(runtime_dir) / "podman" / "podman.sock").is_socket():
        return f"unix://{runtime_dir}/podman/podman.sock"
    return None


def engine_report(base_url: str | None = None) -> EngineReport:
    """Ping the engine and read its version and cgroup mode; never raises."""
    url = base_url or find_engine_url()
    if url is None:
        tried = ", ".join(SOCKET_PATHS)
        return EngineReport(False, None, problems=(f"DOCKER_HOST unset and no socket at {tried}",))
    try:
        import docker
    except ImportError:
        return EngineReport(False, url, problems=("the docker SDK is missing: pip install docker",))
    try:
        client = docker.DockerClient(base_url=url, timeout=10)
        version, info = client.version(), client.info()
    except Exception as exc:  # any failure to reach it is the report's content
        return EngineReport(False, url, problems=(f"engine at {url} did not answer: {exc}",))
    components = {c.get("Name", "").lower() for c in version.get("Components") or []}
    is_podman = any("podman" in name for name in components)
    return EngineReport(
        True,
        url,
        engine="podman" if is_podman else "docker",
        version=version.get("Version"),
        api_version=version.get("ApiVersion"),
        cgroup_version=str(info.get("CgroupVersion") or "?"),
        cgroup_driver=info.get("CgroupDriver"),
        runtime=info.get("DefaultRuntime"),
    )


def host_config_args(limits: Limits) -> dict[str, Any]:
    """Limits → Docker's HostConfig, as Docker and Kubernetes read them. Uncapped = left unset.

    Swap equals the memory ceiling (MemorySwap = Memory), so the ceiling is a kill point, as a
    Kubernetes limit is. The pids ceiling stays on whatever the policy (policy.DEFAULT_PIDS_MAX).
    """
    args: dict[str, Any] = {
        "mem_reservation": limits.memory_floor_bytes,
        "cpu_shares": max(2, int(limits.cpu_floor * CPU_SHARES_PER_CPU)),
    }
    if limits.memory_ceiling_bytes is not None:
        args["mem_limit"] = limits.memory_ceiling_bytes
        args["memswap_limit"] = limits.memory_ceiling_bytes
        args["mem_reservation"] = min(limits.memory_floor_bytes, limits.memory_ceiling_bytes)
    if limits.cpu_ceiling is not None:
        args["nano_cpus"] = int(limits.cpu_ceiling * NANO_CPUS_PER_CPU)
    if limits.pids_max is not None:
        args["pids_limit"] = limits.pids_max
    return args


def describe_applied(args: Mapping[str, Any]) -> str:
    keys = ("mem_limit", "memswap_limit", "mem_reservation", "nano_cpus", "cpu_shares")
    shown = [f"{k}={args[k]}" for k in (*keys, "pids_limit", "storage_opt") if k in args]
    unset = [k for k in (*keys[:2], "nano_cpus") if k not in args]
    return "oci limits: " + " ".join(shown) + (f" (unset: {', '.join(unset)})" if unset else "")


class OciBackend:
    name: ClassVar[str] = "oci"

    def __init__(self, options: BackendOptions, settings: OciSettings | None = None) -> None:
        self.options = options
        self.settings = settings or OciSettings.from_env()
        self._client: Any = None
        self._report: EngineReport | None = None
        self._storage_quota = self.settings.storage_quota
        self._quota_refused = ""  # the engine's reason, repeated in every trial's notes
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """A `docker.DockerClient` on the engine; HostUnsupported when none answers."""
        with self._lock:
            if self._client is None:
                report = self.report()
                if not report.found:
                    raise HostUnsupported("; ".join(report.problems))
                import docker

                self._client = docker.DockerClient(base_url=report.url, timeout=API_TIMEOUT_S)
            return self._client

    def report(self) -> EngineReport:
        if self._report is None or not self._report.found:
            self._report = engine_report(self.settings.base_url)
        return self._report

    def check(self) -> list[str]:
        report = self.report()
        problems = list(report.problems)
        if (
            report.found
            and self.settings.uv_shim
            and not _offline.uv_shim_ready(self.settings.cache_dir)
        ):
            problems.append("uv shim requested but not prepared: run build_offline_bases()")
        return problems

    def enforcement(self) -> Enforcement:
        report = self.report()
        where = f"{report.engine} {report.version}, cgroup v{report.cgroup_version}"
        return Enforcement(
            memory_ceiling="HostConfig.Memory = MemorySwap (no swap): the kernel OOM-kills",
            memory_floor="HostConfig.MemoryReservation (soft limit, reclaimed first above it)",
            cpu_ceiling="HostConfig.NanoCpus (CFS quota)",
            cpu_floor="HostConfig.CpuShares = 1024 × CPUs",
            pids_ceiling="HostConfig.PidsLimit",
            storage_ceiling=(
                "StorageOpt size= (writable layer quota)"
                if self._storage_quota
                else "not enforced: the storage driver has no quota (overlay needs xfs pquota)"
            ),
            isolation=f"OCI container ({where})",
        )

    def start(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
    ) -> OciSandbox:
        client = self.client
        try:
            image = _images.ensure_image(client, task, images_dir=self.options.run_dir / "images")
        except SandboxStartError:
            raise
        except Exception as exc:
            raise SandboxStartError(f"image for {task.name}: {type(exc).__name__}: {exc}") from exc
        trial_dir.mkdir(parents=True, exist_ok=True)
        args = host_config_args(limits)
        if self._storage_quota and limits.storage_ceiling_bytes is not None:
            args["storage_opt"] = {"size": str(limits.storage_ceiling_bytes)}
        container_id = self._create(task, image.tag, args, trial_id, mounts)
        notes = [describe_applied(args), image.describe(), f"engine: {self.report().describe()}"]
        if limits.storage_ceiling_bytes is not None and "storage_opt" not in args:
            notes.append(f"storage ceiling not enforced: {self._quota_refused or 'disabled'}")
        try:
            sandbox = OciSandbox(client, container_id, task, limits, notes)
            sandbox.prepare(uv_shim=self.settings.uv_shim)
            return sandbox
        except BaseException as exc:
            with contextlib.suppress(Exception):
                client.api.remove_container(container_id, force=True, v=True)
            if isinstance(exc, Exception) and not isinstance(exc, SandboxStartError):
                raise SandboxStartError(f"container for {task.name}: {exc}") from exc
            raise

    def _create(
        self,
        task: Task,
        image: str,
        args: dict[str, Any],
        trial_id: str,
        read_only: Sequence[ReadOnlyMount] = (),
    ) -> str:
        """Create and start; `args` loses storage_opt if the engine refuses it (then for good)."""
        import docker.errors
        from docker.types import Mount

        api = self.client.api
        mounts = _offline.uv_shim_mounts(self.settings.cache_dir) if self.settings.uv_shim else []
        mounts += [
            Mount(str(m.target), str(m.source), type="bind", read_only=True) for m in read_only
        ]
        config = {
            "image": image,
            "entrypoint": KEEPALIVE,
            "working_dir": str(task.workdir),
            "name": container_name(self.options.run_id, trial_id),
            "labels": {
                LABEL_RUN: self.options.run_id,
                LABEL_TRIAL: trial_id,
                LABEL_TASK: task.name,
            },
        }
        # Harbor's default: network on unless task.toml turns it off (TB2 verifiers need it).
        network = "none" if task.allow_internet is False else "bridge"
        for attempt in ("with quota", "without quota"):
            try:
                host_config = api.create_host_config(
                    init=True, network_mode=network, mounts=mounts, **args
                )
                created = api.create_container(host_config=host_config, **config)
                api.start(created["Id"])
                return str(created["Id"])
            except docker.errors.APIError as exc:
                with contextlib.suppress(Exception):
                    api.remove_container(config["name"], force=True, v=True)
                if attempt == "with quota" and "storage_opt" in args and _is_quota_error(exc):
                    self._storage_quota = False
                    args.pop("storage_opt")
                    reason = getattr(exc, "explanation", None) or str(exc)
                    self._quota_refused = str(reason)[-160:]
                    continue
                raise SandboxStartError(f"create/start of {task.name} failed: {exc}") from exc
        raise AssertionError("unreachable")

    def reap(self, run_id: str) -> int:
        """Containers, networks and volumes labelled with `run_id` that a dead harness left."""
        api = self.client.api
        label = {"label": f"{LABEL_RUN}={run_id}"}
        removed = 0
        for container in api.containers(all=True, filters=label):
            with contextlib.suppress(Exception):
                api.remove_container(container["Id"], force=True, v=True)
                removed += 1
        for network in api.networks(filters=label):
            with contextlib.suppress(Exception):
                api.remove_network(network["Id"])
                removed += 1
        for volume in (api.volumes(filters=label) or {}).get("Volumes") or []:
            with contextlib.suppress(Exception):
                api.remove_volume(volume["Name"], force=True)
                removed += 1
        return removed


def _is_quota_error(exc: Exception) -> bool:
    """The engine cannot cap the writable layer (overlay without xfs project quotas)."""
    text = str(exc).lower()
    return any(word in text for word in ("storage-opt", "storage opt", "quota", "xfs", "size"))


def build_offline_bases(
    *,
    base_url: str | None = None,
    cache_dir: Path = _offline.DEFAULT_CACHE_DIR,
    mirror: str | None = None,
    with_uv: bool = True,
    log: _offline.Log = print,
) -> list[_offline.StandIn]:
    """`levelfield images offline-bases`: stand-ins for the FROM images no registry serves here."""
    backend = OciBackend(BackendOptions("offline-bases", cache_dir), OciSettings(base_url))
    return _offline.build_offline_bases(
        backend.client, cache_dir=cache_dir, mirror=mirror, with_uv=with_uv, log=log
    )


def create(options: BackendOptions, settings: OciSettings | None = None) -> OciBackend:
    if settings is None and options.uv_shim:
        settings = dataclasses.replace(OciSettings.from_env(), uv_shim=True)
    return OciBackend(options, settings)


def container_name(run_id: str, trial_id: str) -> str:
    """Readable and unique: engines accept [a-zA-Z0-9][a-zA-Z0-9_.-]*, so a hash keeps it so."""
    raw = f"lf-{run_id}-{trial_id}"
    clean = re.sub(r"[^a-zA-Z0-9_.-]+", "-", raw)[:80]
    return f"{clean}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


@dataclass(slots=True)
class _Snapshot:
    """The last counters read while the container's cgroup existed: an OOM kill of the init
    takes the container, and its cgroup, with it."""

    counters: _cgroup.Counters = field(default_factory=_cgroup.Counters)
    engine_oom_killed: bool = False


class OciSandbox:
    """A started trial container; every phase is an exec in it."""

    def __init__(
        self, client: Any, container_id: str, task: Task, limits: Limits, notes: list[str]
    ) -> None:
        self.client, self.api = client, client.api
        self.container_id, self.task, self.limits = container_id, task, limits
        self.notes = notes
        state = self.api.inspect_container(container_id)["State"]
        self.init_pid = int(state.get("Pid") or 0)
        self.cgroup = _container.container_cgroup(self.init_pid)
        if self.cgroup is None:
            notes.append("container cgroup not readable from this host: evidence from the engine")
        self._snapshot = _Snapshot()
        self._closed = False
        self._uv_shim = False

    def prepare(self, *, uv_shim: bool) -> None:
        """Create /logs/{agent,verifier,artifacts}, as Harbor's mounts would."""
        self.api.put_archive(self.container_id, "/", _container.dirs_tar(LOG_DIRS))
        self._uv_shim = uv_shim

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
            with open(log_path, "ab") as log:
                timed_out = _container.run_exec(self.api, exec_id, log, timeout_s)
            code = self.api.exec_inspect(exec_id).get("ExitCode")
        except Exception as exc:
            self._require_alive()
            raise SandboxDied(f"exec in {self.container_id[:12]} failed: {exc}") from exc
        self._remember_counters()
        exit_code = None if timed_out else (int(code) if code is not None else None)
        return PhaseResult(
            exit_code=exit_code,
            signal=_output.signal_of(exit_code),
            timed_out=timed_out,
            duration_s=time.monotonic() - started,
            output_tail=_output.tail(log_path, offset=offset),
        )

    def copy_in(self, src: Path, dest: PurePosixPath) -> None:
        """A directory replaces whatever the agent left at `dest`; the uv shim rides with /tests."""
        target = dest if src.is_dir() else dest.parent
        prep = 'rm -rf -- "$1" && mkdir -p -- "$1"' if src.is_dir() else 'mkdir -p -- "$1"'
        self._quiet(["sh", "-c", prep, "sh", str(target)])
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            if src.is_dir():
                for child in sorted(src.iterdir()):
                    tar.add(child, arcname=child.name)
            else:
                tar.add(src, arcname=dest.name)
        if not self.api.put_archive(self.container_id, str(target), buffer.getvalue()):
            raise SandboxDied(f"copy of {src} to {dest} was refused by the engine")
        if dest == PurePosixPath("/tests") and self._uv_shim:
            self._quiet(["sh", "-c", _offline.UV_SHIM_INSTALL])

    def read_file(self, path: PurePosixPath) -> bytes | None:
        import docker.errors

        try:
            stream, _ = self.api.get_archive(self.container_id, str(path))
            data = b"".join(stream)
        except docker.errors.APIError:
            return None
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            member = next((m for m in tar.getmembers() if m.isfile()), None)
            extracted = tar.extractfile(member) if member is not None else None
            return extracted.read() if extracted is not None else None

    def usage(self) -> Usage:
        if self.cgroup is None:
            return Usage(0, 0.0)
        reading = self.cgroup.usage()
        self._remember_counters()  # a few µs: keeps them if the container dies with its cgroup
        return Usage(reading.memory_bytes, reading.cpu_usage_s)

    def is_alive(self) -> bool:
        return bool(self._state().get("Running"))

    def evidence(self) -> Evidence:
        alive = self.is_alive()
        self._remember_counters()
        c = self._snapshot.counters
        return Evidence(
            oom_kills=max(c.oom_kills, int(self._snapshot.engine_oom_killed)),
            memory_failcnt=c.memory_failcnt,
            memory_peak_bytes=c.memory_peak_bytes,
            pids_max_hits=c.pids_max_hits,
            cpu_nr_periods=c.cpu_nr_periods,
            cpu_throttled_periods=c.cpu_throttled_periods,
            cpu_throttled_s=c.cpu_throttled_s,
            cpu_usage_s=c.cpu_usage_s,
            storage_ceiling_bytes=self.limits.storage_ceiling_bytes,
            sandbox_alive=alive,
            notes=tuple(self.notes),
        )

    def network_namespace(self) -> Path | None:
        """The container's namespace, through its init's pid; None when the engine is remote
        (its processes are not this host's)."""
        path = Path(f"/proc/{self.init_pid}/ns/net")
        return path if self.init_pid and path.exists() else None

    def collect_logs(self, dest: Path) -> None:
        """Copy the container's /logs tree to `dest` (works on a stopped container too)."""
        import docker.errors

        dest.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile() as spool:
            try:
                stream, _ = self.api.get_archive(self.container_id, "/logs")
                for chunk in stream:
                    spool.write(chunk)
            except docker.errors.APIError:
                return
            spool.seek(0)
            with tarfile.open(fileobj=spool) as tar:
                for member in tar.getmembers():
                    parts = PurePosixPath(member.name).parts[1:]  # drop the leading "logs"
                    if not parts:
                        continue
                    member.name = str(PurePosixPath(*parts))
                    with contextlib.suppress(tarfile.TarError, OSError):
                        tar.extract(member, dest, filter="data")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.api.remove_container(self.container_id, force=True, v=True)

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

    def _quiet(self, argv: list[str]) -> None:
        """A helper command of the harness (mkdir, shim install); its failure is the sandbox's."""
        self._require_alive()
        exec_id = self.api.exec_create(self.container_id, argv)["Id"]
        output = self.api.exec_start(exec_id)
        code = self.api.exec_inspect(exec_id).get("ExitCode")
        if code != 0:
            text = output.decode(errors="replace").strip()[-500:]
            raise SandboxDied(f"{argv[0]} in the container exited {code}: {text}")
