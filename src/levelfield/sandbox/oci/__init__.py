"""The `oci` backend: one container per trial, through the Docker Engine API (Docker or Podman).

Start = the task's image (built from environment/ and cached by content, `_images.py`), a container
created with the limits as Docker and Kubernetes read them (ceiling → Memory = MemorySwap,
NanoCpus, PidsLimit; floor → MemoryReservation, CpuShares = 1024 × CPUs), confined as a default
Docker container is (CONFINEMENT), and an idle init that nothing inside can kill; every phase is
an exec of `bash -c` in the task's WORKDIR, so background processes the agent starts are still
there for the verifier. Evidence is read from the container's own cgroup directories, never from
the engine's state: under cgroup v1 podman reports OOMKilled=false for a container the kernel did
OOM-kill. Every object carries `levelfield.run` and `levelfield.trial` labels, so `reap` finds
exactly what a killed run left.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from levelfield.errors import HostUnsupported, SandboxStartError
from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.sandbox import (
    DEFAULT_CAPABILITIES,
    BackendOptions,
    Enforcement,
    ReadOnlyMount,
    _netns,
    _seccomp,
    cgroups,
)
from levelfield.sandbox.oci import (
    _engine,
    _engine_files,
    _images,
    _layer_disk,
    _offline,
    _pull,
    _reconnect,
)
from levelfield.sandbox.oci._sandbox import OciSandbox
from levelfield.tasks import Task

# Re-exported: doctor, the `auto` backend and the tests ask the engine, and read a task's FROM
# images, through the backend's module, never its private ones.
EngineReport = _engine.EngineReport
engine_report = _engine.engine_report
find_engine_url = _engine.find_engine_url
other_engine_urls = _engine.other_engine_urls
SOCKET_PATHS = _engine.SOCKET_PATHS
from_images = _images.from_images

LABEL_RUN = "levelfield.run"
LABEL_TRIAL = "levelfield.trial"
LABEL_TASK = "levelfield.task"
# pid 1 of the container, in place of the engine's init: a signal from inside cannot kill it
# (`kill -9 -1` leaves the trial standing for its verifier), and it reaps what is orphaned to it.
KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 3600 & wait; done"]
# A default container's rights, the same on Docker and Podman (whose own default has fewer),
# with no-new-privileges, and in a cgroup namespace of its own where the engine honours it: Docker
# does; Podman 4's Docker API ignores CgroupnsMode and keeps its default (private on cgroup v2,
# the host's on v1, where /sys/fs/cgroup is still read-only and CAP_SYS_ADMIN absent).
CONFINEMENT: dict[str, Any] = {
    "cap_drop": ["ALL"],
    "cap_add": [cap.upper() for cap in DEFAULT_CAPABILITIES],
    "cgroupns": "private",
    # Nothing reads the container's own output (every phase is a streamed exec), and the
    # engine's log of it is a file on the engine's disk, beyond every ceiling: an agent writing
    # to /proc/1/fd/1 would fill it (Docker's JSON log takes six bytes for each zero byte).
    "log_config": {"type": "none", "config": {}},
}
CONFINEMENT_OPTS = ["no-new-privileges"]  # and our seccomp profile (`_seccomp_opt`)
API_TIMEOUT_S = 120  # one API call (not a phase: phases stream with no socket timeout)
CPU_SHARES_PER_CPU = cgroups.CPU_SHARES_PER_CPU
NANO_CPUS_PER_CPU = 1_000_000_000


@dataclass(frozen=True, slots=True)
class OciSettings:
    """What the `oci` backend takes beyond the run: the engine and the offline helpers."""

    base_url: str | None = None  # None: DOCKER_HOST, then SOCKET_PATHS
    uv_shim: bool = False  # place uv/uvx (+ CPython 3.13 for `uvx -p 3.13`) with the tests
    cache_dir: Path = _offline.DEFAULT_CACHE_DIR
    storage_quota: bool = True  # try StorageOpt size=; off after the engine refuses it once
    image_mode: _pull.ImageMode = _pull.ImageMode.AUTO

    @classmethod
    def from_env(cls) -> OciSettings:
        """For `get_backend("oci", options)`, which passes no settings: LEVELFIELD_UV_SHIM=1,
        LEVELFIELD_CACHE_DIR and DOCKER_HOST configure it until the CLI passes settings."""
        return cls(uv_shim=os.environ.get("LEVELFIELD_UV_SHIM", "") in ("1", "true", "yes"))


def host_config_args(limits: Limits, host_cpus: int | None = None) -> dict[str, Any]:
    """Limits → Docker's HostConfig, as Docker and Kubernetes read them. Uncapped = left unset.

    Swap equals the memory ceiling (MemorySwap = Memory), so the ceiling is a kill point, as a
    Kubernetes limit is. The pids ceiling stays on whatever the policy (policy.DEFAULT_PIDS_MAX).
    A CPU ceiling above the host's CPUs cannot bind, and Docker refuses it: it becomes the
    host's CPU count (`describe_applied` says so).
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
        cpus = min(limits.cpu_ceiling, host_cpus) if host_cpus else limits.cpu_ceiling
        args["nano_cpus"] = int(cpus * NANO_CPUS_PER_CPU)
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
        self._pulls = _pull.PullCache()  # one pull per pinned image per invocation

    @property
    def client(self) -> Any:
        """A `docker.DockerClient` on the engine; HostUnsupported when none answers."""
        with self._lock:
            if self._client is None:
                report = self.report()
                if not report.found:
                    raise HostUnsupported("; ".join(report.problems))
                import docker

                client = docker.DockerClient(base_url=report.url, timeout=API_TIMEOUT_S)
                self._client = _reconnect.reconnecting(client)
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
            storage_ceiling=self._storage_enforcement(),
            isolation=f"OCI container ({where}); a default container's capabilities, "
            "no-new-privileges, levelfield's seccomp profile; network: its own sealed link",
        )

    def start(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
        secrets: Masker | None = None,
    ) -> OciSandbox:
        client = self.client
        try:
            image = _images.ensure_image(
                client,
                task,
                images_dir=self.options.run_dir / "images",
                mode=self.settings.image_mode,
                pulls=self._pulls,
                network=self.report().build_network,
            )
        except SandboxStartError:
            raise
        except Exception as exc:
            raise SandboxStartError(f"image for {task.name}: {type(exc).__name__}: {exc}") from exc
        where = {"trial_id": trial_id, "trial_dir": trial_dir, "mounts": mounts}
        return self.start_on(image, task, limits, **where, secrets=secrets)

    def present_image(self, names: Sequence[str]) -> _images.BuiltImage | None:
        """The first of `names` the engine already has, as `start_on` takes it; never pulled
        (doctor starts its probe sandbox on what is there)."""
        tags = [t for i in self.client.api.images() for t in i.get("RepoTags") or []]
        tag = next((t for n in names for t in tags if t == n or t.endswith(f"/{n}")), None)
        found = _pull.inspect_image(self.client, tag) if tag else None
        if tag is None or found is None:
            return None
        return _images.BuiltImage(tag, found["Id"], True, None, None, source="present")

    def start_on(
        self,
        image: _images.BuiltImage,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
        secrets: Masker | None = None,
    ) -> OciSandbox:
        """`start` once the image is there (doctor starts one on an image the engine has)."""
        client = self.client
        trial_dir = trial_dir.resolve()  # the engine binds the disk's paths: never relative
        trial_dir.mkdir(parents=True, exist_ok=True)
        args = host_config_args(limits, self.report().cpus)
        container_id, disk, unenforced = self._create_capped(
            task, image.tag, args, (trial_id, trial_dir, _bind_read_only(mounts)),
            limits.storage_ceiling_bytes,
        )
        notes = [describe_applied(args), image.describe(), f"engine: {self.report().describe()}"]
        if "nano_cpus" in args and args["nano_cpus"] < (limits.cpu_ceiling or 0) * 1e9:
            notes.append(f"cpu ceiling {limits.cpu_ceiling:g} > the host's CPUs: applied as all")
        if disk is not None:
            notes.append(disk.describe())
        elif limits.storage_ceiling_bytes is not None and "storage_opt" not in args:
            notes.append(f"storage ceiling not enforced: {unenforced}")
        try:
            sandbox = OciSandbox(client, container_id, task, limits, notes, disk)
            sandbox.image = image.record()
            sandbox.secrets = secrets or sandbox.secrets
            if self.settings.uv_shim:
                sandbox.shim = _offline.shim_sources(self.settings.cache_dir)
            # Harbor's default: network on unless task.toml turns it off (TB2 verifiers need it)
            if task.allow_internet is not False:
                sandbox.network = _link(self.options.run_id, trial_id, sandbox)
            sandbox.prepare(uv_shim=self.settings.uv_shim)
            if limits.storage_ceiling_bytes is not None and sandbox.cgroup is not None:
                moved = _engine_files.onto_the_container(sandbox.init_pid)  # a local engine's
                if moved:
                    notes.append(_engine_files.describe(moved))
            if disk is not None and not disk.holds_the_layer(PurePosixPath("/logs")):
                raise SandboxStartError(
                    f"container for {task.name}: its writable layer is not on the storage "
                    "ceiling's disk (the engine's layer folder was remounted as it started)"
                )
            return sandbox
        except BaseException as exc:
            _layer_disk.remove_container(client.api, container_id, disk)
            if isinstance(exc, Exception) and not isinstance(exc, SandboxStartError):
                raise SandboxStartError(f"container for {task.name}: {exc}") from exc
            raise

    def _seccomp_opt(self) -> str:
        """Our profile (_seccomp.py) on both engines: Podman's own default allows keyctl, and so
        root's keyring on the host. Podman reads it from a file, Docker from the option itself."""
        if self.report().engine == "podman":
            return f"seccomp={_seccomp.engine_profile_file(DEFAULT_CAPABILITIES)}"
        return "seccomp=" + json.dumps(_seccomp.engine_profile(DEFAULT_CAPABILITIES))

    def _storage_enforcement(self) -> str:
        disk = "the writable layer on a loop-mounted ext4 of the ceiling's size"
        if not _layer_disk.is_possible(self.report().url):
            disk = "not enforced (a remote engine, or not root: no loop-mounted disk)"
        if self._storage_quota:
            return f"StorageOpt size= (writable layer quota) if the engine takes it, else {disk}"
        return f"{disk} (the engine refused StorageOpt size=: {self._quota_refused})"

    def _create_capped(
        self,
        task: Task,
        image: str,
        args: dict[str, Any],
        trial: tuple[str, Path, list[Any]],
        ceiling: int | None,
    ) -> tuple[str, _layer_disk.LayerDisk | None, str]:
        """The storage ceiling the engine's way (StorageOpt size=; refused once, never again),
        else on a loop-mounted disk under the container's writable layer, placed between its
        creation and its start. Also: why the ceiling is not enforced, when it is not."""
        trial_id, trial_dir, bound = trial
        if ceiling is not None and self._storage_quota:
            args["storage_opt"] = {"size": str(ceiling)}
            try:
                return self._create(task, image, args, trial_id, bound), None, ""
            except _QuotaRefused as refused:
                self._storage_quota, self._quota_refused = False, refused.reason
                args.pop("storage_opt")
        if ceiling is None or not _layer_disk.is_possible(self.report().url):
            return self._create(task, image, args, trial_id, bound), None, self._quota_refused
        placed: list[_layer_disk.LayerDisk] = []
        unenforced: list[str] = []

        def place(inspected: dict[str, Any]) -> None:
            layer = _layer_disk.layer_of(inspected)
            if layer is None:
                driver = (inspected.get("GraphDriver") or {}).get("Name", "?")
                why = f"the engine's {driver} storage has no overlay layer folder to cap"
                unenforced.append(why)
            else:
                placed.append(_layer_disk.place(layer, trial_dir, ceiling))

        def release() -> None:  # the container is not running: the disk comes off its layer
            while placed:
                _layer_disk.release(placed.pop())

        container_id = self._create(task, image, args, trial_id, bound, (place, release))
        return container_id, (placed or [None])[0], "; ".join(unenforced)

    def _create(
        self,
        task: Task,
        image: str,
        args: dict[str, Any],
        trial_id: str,
        extra: list[Any],
        before_start: tuple[Callable[[dict[str, Any]], None], Callable[[], None]] | None = None,
    ) -> str:
        """Create and start the container; _QuotaRefused if the engine refuses StorageOpt.
        `before_start` is a hook that sees the created container's inspection, and its undoing,
        run on a failure before the engine removes the container (and its layer folder)."""
        import docker.errors

        api = self.client.api
        mounts = _offline.uv_shim_mounts(self.settings.cache_dir) if self.settings.uv_shim else []
        mounts += extra
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
        try:
            host_config = api.create_host_config(
                init=False,
                network_mode="none",  # the trial's own link is attached after the start
                mounts=mounts,
                **CONFINEMENT,
                security_opt=[*CONFINEMENT_OPTS, self._seccomp_opt()],
                **args,
            )
            created = api.create_container(host_config=host_config, **config)
            if before_start is not None:
                before_start[0](api.inspect_container(created["Id"]))
            api.start(created["Id"])
            return str(created["Id"])
        except BaseException as exc:
            if before_start is not None:
                with contextlib.suppress(Exception):
                    api.kill(config["name"])
                before_start[1]()
            with contextlib.suppress(Exception):
                api.remove_container(config["name"], force=True, v=True)
            if not isinstance(exc, docker.errors.APIError):
                raise
            if "storage_opt" in args and _is_quota_error(exc):
                reason = getattr(exc, "explanation", None) or str(exc)
                raise _QuotaRefused(str(reason)[-160:]) from exc
            raise SandboxStartError(f"create/start of {task.name} failed: {exc}") from exc

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Before the first trial: pull each pinned image once. Under `--image prebuilt` an image
        neither pullable nor present stops the run here, before any trial is spent on it."""
        if self.settings.image_mode is _pull.ImageMode.BUILD:
            return
        for name in sorted({t.docker_image for t in tasks if t.docker_image}):
            try:
                self._pulls.get(self.client, name)
            except SandboxStartError as exc:
                if self.settings.image_mode is _pull.ImageMode.PREBUILT:
                    users = sorted(t.name for t in tasks if t.docker_image == name)
                    raise SandboxStartError(
                        f"sandbox_error before any trial ({', '.join(users)}): {exc}. Nothing "
                        "was stored: bring the registry up, or run with --image build or auto"
                    ) from exc

    def reap(self, run_id: str) -> int:
        """Containers, networks and volumes labelled with `run_id` that a dead harness left."""
        api = self.client.api
        label = {"label": f"{LABEL_RUN}={run_id}"}
        removed = 0
        containers = api.containers(all=True, filters=label)
        for container in containers:
            with contextlib.suppress(Exception):
                api.kill(container["Id"])
        trials = (self.options.run_dir / "trials").resolve()
        removed += _layer_disk.release_left(trials)  # before the engine removes their layers
        for container in containers:
            with contextlib.suppress(Exception):
                api.remove_container(container["Id"], force=True, v=True)
                removed += 1
        for network in api.networks(filters=label):
            with contextlib.suppress(Exception):
                api.remove_network(network["Id"])
                removed += 1
        for volume in (api.volumes(filters=label) or {}).get("Volumes") or []:
            with contextlib.suppress(Exception):  # any volume the run's label names
                api.remove_volume(volume["Name"], force=True)
                removed += 1
        return removed + _netns.reap(run_id)  # the containers are gone: nothing holds links


class _QuotaRefused(Exception):
    """The engine refused StorageOpt size= (caught in `_create_capped`, never escapes)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
        backend.client,
        cache_dir=cache_dir,
        mirror=mirror,
        with_uv=with_uv,
        log=log,
        network=backend.report().build_network,
    )


def create(options: BackendOptions, settings: OciSettings | None = None) -> OciBackend:
    if settings is None:
        settings = dataclasses.replace(
            OciSettings.from_env(),
            uv_shim=options.uv_shim or OciSettings.from_env().uv_shim,
            image_mode=_pull.ImageMode(options.image_mode),
        )
    return OciBackend(options, settings)


def container_name(run_id: str, trial_id: str) -> str:
    """Readable and unique: engines accept [a-zA-Z0-9][a-zA-Z0-9_.-]*, so a hash keeps it so."""
    raw = f"lf-{run_id}-{trial_id}"
    clean = re.sub(r"[^a-zA-Z0-9_.-]+", "-", raw)[:80]
    return f"{clean}-{hashlib.sha256(raw.encode()).hexdigest()[:8]}"


def _link(run_id: str, trial_id: str, sandbox: OciSandbox) -> _netns.TrialNetwork:
    """The trial's sealed link, in the container's namespace: only a local engine's."""
    if sandbox.cgroup is None or not sandbox.init_pid:
        raise HostUnsupported(
            "a task with network needs its container's namespace on this host, to seal it from "
            "the host and the other trials: run levelfield beside the engine, or set "
            "allow_internet = false in the task's [environment]"
        )
    return _netns.attach(run_id, trial_id, sandbox.init_pid)


def _bind_read_only(mounts: Sequence[ReadOnlyMount]) -> list[Any]:
    """A CLI agent prepared on the host, bound into the container as it is into a process trial."""
    from docker.types import Mount

    return [Mount(str(m.target), str(m.source), type="bind", read_only=True) for m in mounts]
