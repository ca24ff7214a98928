"""Verdicts at the edges on `oci`, against Podman and Docker: OOM evidence where the container's
cgroup cannot be read, a full disk decided by the disk (the trial's and the engine's own),
and a grader that could not grade on a Terminal-Bench 2.0 task, told apart by whose doing it was.

The engine fixtures come from test_oci (each test runs against both engines), hence F811 below.
"""
# ruff: noqa: F811

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from levelfield.policy import Policy, ResourceBounds
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.tasks import load_task

from ..conftest import MakeTask, require
from .test_oci import ENGINES, _run, backend, engine, stand_ins  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.oci, pytest.mark.sandbox]

PYTHON_BASE = "FROM python:3.13-slim-bookworm\nWORKDIR /app\n"
HOG = "python3 -c 'b = b\"x\" * (256 << 20)' && touch /app/done"
# Memory capped at the spec, storage uncapped: a harness in a container of its own cannot
# loop-mount a disk the engine would see, so this one does not ask for one.
MEMORY_ONLY = Policy(name="memory-1x", storage=ResourceBounds(ceiling=None))

_HARNESS = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from levelfield.plan import plan_trials
    from levelfield.policy import Policy
    from levelfield.runner import TrialContext, run_trial
    from levelfield.sandbox import BackendOptions, oci
    from levelfield.tasks import load_task
    task, out, run_id = load_task(Path(sys.argv[1])), Path(sys.argv[2]), sys.argv[3]
    policy = Policy.model_validate_json(sys.argv[4])
    backend = oci.OciBackend(BackendOptions(run_id, out))
    (trial,) = plan_trials([task], ["oracle"], [policy])
    try:
        record = run_trial(trial, backend, TrialContext(run_id, out, "oci"))
    finally:
        backend.reap(run_id)
    print(record.model_dump_json())
""")


def _harness_in_its_own_pid_namespace(
    task: Path, out: Path, *, hide_kernel_log: bool = False
) -> TrialRecord:
    """The harness as it runs in a container of its own: another PID namespace, so the engine's
    PIDs are not its own and no container cgroup can be found through them. With the kernel
    log hidden too (/dev/null over /dev/kmsg in its mount namespace), only the engine can say."""
    require([] if shutil.which("unshare") else ["unshare (util-linux)"], "a PID namespace")
    script = out.parent / f"{out.name}-harness.py"
    script.write_text(_HARNESS)
    argv = [sys.executable, str(script), str(task), str(out), f"ns-{os.getpid()}-{out.name}",
            MEMORY_ONLY.model_dump_json()]  # fmt: skip
    inner = ("mount --bind /dev/null /dev/kmsg && " if hide_kernel_log else "") + 'exec "$@"'
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", inner, "sh", *argv],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return TrialRecord.model_validate(json.loads(done.stdout.strip().splitlines()[-1]))


def test_oom_evidence_where_the_containers_cgroup_is_not_readable(
    make_task: MakeTask, tmp_path: Path, stand_ins: str
) -> None:
    """Before: the engine was asked only after the cgroup counter saw a kill, so with no
    counter to read an OOM-killed agent was failed/tests_failed on both engines. Now Docker's
    `oom` event says it, and the kernel log (naming the container) says it for Podman, which
    sends no such event on cgroup v1. With the kernel log hidden too, Docker's word remains;
    Podman's trial keeps its reward's verdict, and the evidence says that nothing could tell."""
    task = make_task("hog", solve=HOG, memory_mb=64, files={"environment/Dockerfile": PYTHON_BASE})
    # No network: a trial's sealed link needs its container's namespace on the harness's host,
    # which a harness in a PID namespace of its own cannot see (it refuses, and says so).
    toml = task / "task.toml"
    offline = toml.read_text().replace("[environment]\n", "[environment]\nallow_internet = false\n")
    toml.write_text(offline)
    record = _harness_in_its_own_pid_namespace(task, tmp_path / "seen")
    notes = " | ".join(record.evidence.notes)
    assert "container cgroup not readable from this host" in notes
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED), notes
    assert record.agent_phase is not None and record.agent_phase.exit_code == 137
    assert record.evidence.engine_oom_killed is (stand_ins == "docker")
    hidden = _harness_in_its_own_pid_namespace(task, tmp_path / "hidden", hide_kernel_log=True)
    notes = " | ".join(hidden.evidence.notes)
    if stand_ins == "docker":
        assert (hidden.outcome, hidden.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
        assert "an OOM kill by the engine's oom event" in notes
    else:
        assert (hidden.outcome, hidden.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
        assert "no OOM evidence can be read here" in notes and "unknown" in notes


FILL_THEN_EMPTY = "dd if=/dev/zero of=/app/blob bs=1M count=64; rm -f /app/blob; exit 1"
SAY_FULL = "echo 'pip: [Errno 28] No space left on device' >&2; exit 1"


def test_a_full_disk_is_decided_by_the_disk_not_by_what_the_agent_printed(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """The storage ceiling on a loop-mounted disk under the writable layer: filled and emptied
    between two samples, storage_exhausted by the blocks its image kept; the words alone,
    failed (before: both storage_exhausted)."""
    filled = load_task(make_task("filled", solve=FILL_THEN_EMPTY, storage_mb=16))
    record = _run(backend, filled, "strict", tmp_path / "filled")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED)
    assert (record.evidence.storage_written_bytes or 0) > (16 << 20) * 0.8
    said = load_task(make_task("said", solve=SAY_FULL, storage_mb=16))
    record = _run(backend, said, "strict", tmp_path / "said")
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    (note,) = [n for n in record.evidence.notes if "No space left on device' in the" in n]
    assert "never held more than" in note and "not a full disk" in note
    assert record.evidence.host_disk_free_min_bytes is not None  # the engine's disk, read too


MANY_FILES = "mkdir /root/f && cd /root/f && for i in $(seq 1 6000); do : > f$i || exit 1; done"


def test_a_disk_out_of_inodes_is_the_ceilings_not_the_agents(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """Under the ceiling's disk (the whole writable layer), six thousand empty files run a
    16 MiB ext4 out of inodes with its bytes left: storage_exhausted, with the note that says
    which, never the agent's failure."""
    task = load_task(make_task("files", solve=f"{MANY_FILES} && touch /app/done", storage_mb=16))
    record = _run(backend, task, "strict", tmp_path / "files")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED)
    assert (record.evidence.storage_used_bytes or 0) < 8 << 20
    assert any("ran out of inodes" in n for n in record.evidence.notes), record.evidence.notes


GROW_ENGINE_FILES = (
    'echo "localhost lines: $(grep -c localhost /etc/hosts), hostname: $(cat /etc/hostname)"; '
    "dd if=/dev/zero bs=1M count=48 >> /etc/hosts && dd if=/dev/zero bs=1M count=48 >> "
    "/etc/hostname && touch /app/done"
)


def test_the_files_the_engine_binds_in_are_under_the_ceiling(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """/etc/hosts and /etc/hostname are the engine's files, bound in from its own disk: appended
    to, they would take the engine's disk past the trial's ceiling (and every trial's room).
    They are moved onto the container's root before the agent runs: the writes meet the
    16 MiB ceiling, and the files read as the engine wrote them."""
    task = load_task(make_task("etc", solve=GROW_ENGINE_FILES, storage_mb=16))
    record = _run(backend, task, "strict", tmp_path / "etc")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED), (
        record.error
    )
    said = record.agent_phase.output_tail if record.agent_phase else ""
    assert "No space left on device" in said and "localhost lines: 0" not in said, said
    assert re.search(r"localhost lines: [1-9], hostname: \w", said), said
    notes = " ".join(record.evidence.notes)
    assert "/etc/hosts" in notes and "moved onto its own root" in notes, notes


def test_what_the_agent_writes_to_the_containers_own_output_is_kept_nowhere(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """The container's init's stdout and stderr are the engine's to log, to a file on its own
    disk beyond every ceiling (Docker's JSON log takes six bytes for each zero byte written):
    an agent writing 64 MiB there leaves no log of them on the engine's disk."""
    from levelfield.policy import PRESETS, apply_policy

    task = load_task(make_task("out", storage_mb=16))
    limits = apply_policy(PRESETS["strict"], task.spec)
    box = backend.start(task, limits, trial_id="out", trial_dir=tmp_path / "t")  # type: ignore[attr-defined]
    try:
        write = "for fd in 1 2; do dd if=/dev/zero bs=1M count=32 > /proc/1/fd/$fd; done"
        said = box.exec(write, timeout_s=120, log_path=tmp_path / "agent.log")
        assert said.exit_code == 0, said.output_tail
        inspected = box.api.inspect_container(box.container_id)
        assert (inspected["HostConfig"].get("LogConfig") or {}).get("Type") == "none"
        log = Path(inspected.get("LogPath") or "/nonexistent")
        assert not log.is_file() or log.stat().st_size < 1 << 20, log.stat().st_size
    finally:
        box.close()


# --- a grader that could not grade: Terminal-Bench 2.0 tasks, the agent's doing or not ----------

TB2_DPKG_INTERRUPTED = """set -e
mkdir -p /tmp/hang/DEBIAN
printf 'Package: hang\\nVersion: 1\\nArchitecture: all\\nMaintainer: x <x@example.org>\\n' \\
  > /tmp/hang/DEBIAN/control
printf 'Description: its postinst never returns\\n' >> /tmp/hang/DEBIAN/control
printf '#!/bin/sh\\nsleep 600\\n' > /tmp/hang/DEBIAN/postinst
chmod 755 /tmp/hang/DEBIAN/postinst
dpkg-deb --build /tmp/hang /tmp/hang.deb
apt-get install -y /tmp/hang.deb > /tmp/apt.log 2>&1 &
until grep -q 'Setting up hang' /tmp/apt.log; do sleep 0.2; done
kill -9 $!  # the agent gives up on the hung install; dpkg, its child, runs on with the lock
"""


def _tb2_task(tmp_path: Path, name: str, env: dict[str, str] | None = None) -> Path:
    """A copy of a sample task, built from its own Dockerfile (its pinned image is on a registry
    this machine cannot reach), with environment variables added as an image could set them."""
    from ..conftest import TB2_SAMPLE

    if not (TB2_SAMPLE / name).is_dir():
        require([str(TB2_SAMPLE / name)], "the TB2 sample")
    root = tmp_path / "dataset" / name
    shutil.copytree(TB2_SAMPLE / name, root)
    toml = root / "task.toml"
    toml.write_text("".join(ln for ln in toml.read_text().splitlines(True)
                            if not ln.startswith("docker_image")))  # fmt: skip
    dockerfile = root / "environment" / "Dockerfile"
    extra = "".join(f"ENV {key}={value}\n" for key, value in (env or {}).items())
    dockerfile.write_text(dockerfile.read_text() + extra)
    return root


def _with_agent(root: Path, out: Path, command: str, **options: object) -> TrialRecord:
    from levelfield.agents import AgentOptions

    from ._helpers import run_records

    agent = AgentOptions(command=command, name="edge")
    (record,) = run_records(root, out, agents=["command"], agent_options=agent, backend="oci",
                            policies=["headroom"], **options)  # fmt: skip
    return record


def _graded_nothing(record: TrialRecord) -> str:
    (note,) = [n for n in record.evidence.notes if n.startswith("verifier graded nothing")]
    return note


def test_a_grader_the_agent_left_without_dpkg_is_the_agents_failure(
    tmp_path: Path, stand_ins: str
) -> None:
    """regex-log's test.sh installs curl with apt-get to fetch uv. An agent that gave up on a hung
    `apt-get install` left dpkg locked or interrupted: the grader's apt-get cannot install curl,
    and pytest never runs. Before: infra_error/verifier_error; it is the agent's doing."""
    root = _tb2_task(tmp_path, "regex-log")
    record = _with_agent(root, tmp_path / "run", TB2_DPKG_INTERRUPTED)
    assert record.reward == 0.0
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.GRADER_BROKEN)
    assert "ctrf.json" in _graded_nothing(record)
    (note,) = [n for n in record.evidence.notes if n.startswith("the grader could not run")]
    assert "the agent left dpkg broken" in note
    # Either state, as the kill left it: dpkg still running its postinst with the lock, or
    # killed too (the hangup of apt's terminal) before it could record the package configured.
    assert "/var/lib/dpkg/lock. It is held by process" in note or "dpkg was interrupted" in note


BREAK_PIP = "python3 -m pip uninstall -y pip"
REMOVE_PYTHON = "rm -f /usr/local/bin/python3*"


def test_a_grader_whose_python_or_pip_the_agent_removed_is_the_agents_failure(
    tmp_path: Path, stand_ins: str
) -> None:
    """kv-store-grpc's test.sh installs pytest with pip. An agent that uninstalled pip, or removed
    python3, leaves it unable to: the engine's diff of the container shows who removed them.
    Before: infra_error/verifier_error."""
    root = _tb2_task(tmp_path, "kv-store-grpc")
    for command, tool, path in (
        (BREAK_PIP, "pip", "site-packages/pip deleted"),
        (REMOVE_PYTHON, "python", "/usr/local/bin/python3 deleted"),
    ):
        record = _with_agent(root, tmp_path / tool, command)
        assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.GRADER_BROKEN), tool
        assert "ctrf.json" in _graded_nothing(record)
        (note,) = [n for n in record.evidence.notes if n.startswith("the grader could not run")]
        assert f"the agent broke the grader's {tool}" in note and path in note


@pytest.fixture
def docker_only(monkeypatch: pytest.MonkeyPatch) -> str:
    """One engine where the engine does not matter (the verifier's reading of its own log):
    Docker, whose trials are the quicker here."""
    from levelfield.sandbox import oci

    from .test_oci import _engine_problems

    require(_engine_problems(ENGINES["docker"], "docker"), "the docker engine")
    monkeypatch.setenv("DOCKER_HOST", ENGINES["docker"])
    oci.build_offline_bases(base_url=ENGINES["docker"], log=lambda line: None)  # cached: ~1 s
    return ENGINES["docker"]


def test_a_grader_whose_package_index_is_down_is_an_infra_error(
    tmp_path: Path, docker_only: str
) -> None:
    """kv-store-grpc's pip pointed at an index answering 503, as a mirror an image names can be:
    the grader graded nothing, and nothing of it is the agent's, whose work was the reference
    solution's. pip retries, then says only that it found no version (the 503 shows with -v);
    uv says "HTTP status server error (503 ...)" (tests/unit/test_verifier.py). Unchanged:
    infra_error/verifier_error: nothing in the bootstrap's evidence is the agent's doing."""
    from ._package_index import package_index

    with package_index(tmp_path / "index", size_bytes=1 << 10, rate_bps=0, status=503) as index:
        mirror = {"PIP_INDEX_URL": index.index_url, "PIP_TRUSTED_HOST": index.host}
        root = _tb2_task(tmp_path, "kv-store-grpc", env=mirror)
        record = _with_agent(root, tmp_path / "run", "bash /solution/solve.sh")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.VERIFIER_ERROR)
    note = _graded_nothing(record)
    assert "No matching distribution found for pytest" in note, note
    assert not any(n.startswith("the grader could not run") for n in record.evidence.notes)


# --- the engine's own disk full, with no ceiling of the trial's --------------------------------

ENGINE_DISK_MB = 512
BASE_IMAGE = "debian:bookworm-slim"  # the stand-in every engine here holds
FILL_THE_ENGINE = "dd if=/dev/zero of=/root/fill bs=1M count=2048; sleep 2; rm /root/fill; exit 1"


def _wait_answering(socket: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    from ._chaos import wait_for

    ping = ["curl", "-fsS", "--max-time", "2", "--unix-socket", str(socket), "http://d/_ping"]
    wait_for(lambda: proc.poll() is not None or subprocess.run(ping, capture_output=True)
             .returncode == 0, "a private engine", timeout_s=120)  # fmt: skip
    assert proc.poll() is None, log.read_text(errors="replace")[-2000:]


@pytest.fixture
def engine_on_a_small_disk(tmp_path: Path, stand_ins: str) -> Iterator[str]:
    """A private engine of the kind under test whose storage is a 512 MiB ext4 disk, loop-mounted,
    holding only the base image: a container's uncapped writes fill the engine's own disk. Its
    socket and exec root live under /run: a socket path is limited to 108 bytes."""
    from levelfield.sandbox.disks import mount_ext4, unmount

    require([t for t in ("curl", "dockerd" if stand_ins == "docker" else "podman")
             if shutil.which(t) is None], "a private engine")  # fmt: skip
    disk = tmp_path / "engine-disk"
    disk.mkdir()
    mount_ext4(tmp_path / "engine-disk.img", disk, ENGINE_DISK_MB << 20)
    run = Path(f"/run/levelfield-edge-{os.getpid()}-{tmp_path.name[-6:]}")
    run.mkdir()
    socket, log = run / "engine.sock", tmp_path / "engine.log"
    if stand_ins == "podman":
        store = ["podman", "--root", str(disk / "storage"), "--runroot", str(run / "state")]
        argv = [*store, "system", "service", "--time=0", f"unix://{socket}"]
        load = (f"podman save {BASE_IMAGE} | {' '.join(store)} load", [])
    else:
        argv = ["dockerd", "--host", f"unix://{socket}", "--data-root", str(disk / "docker"),
                "--exec-root", str(run / "exec"), "--pidfile", str(run / "dockerd.pid"),
                "--iptables=false", "--ip-masq=false", "--bridge=none"]  # fmt: skip
        main = ENGINES["docker"].removeprefix("unix://")
        load = (f"docker -H unix://{main} save {BASE_IMAGE} | docker -H unix://{socket} load", [])
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_answering(socket, proc, log)
        subprocess.run(load[0], shell=True, check=True, capture_output=True, timeout=300)
        yield f"unix://{socket}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # conmon runs `podman --root DISK... container cleanup` as its container exits, maybe
        # after the service: that podman would bind the store's overlay dir again, on the root
        # disk once ours is unmounted. Wait for every process naming the disk first.
        _wait_for_processes_naming(disk)
        _unmount_below(run, disk)  # dockerd's netns files, podman's bind of its overlay dir
        shutil.rmtree(run, ignore_errors=True)
        unmount(disk)
        assert not [m for m in _mounts() if m.startswith((str(run), str(disk)))], "leaked mounts"


def _wait_for_processes_naming(path: Path, timeout_s: float = 60) -> None:
    """Until no process has `path` in its command line; SIGKILL what is left after the timeout.
    An exec session's conmon is killed at once: it would only sit out its exit delay (300 s)
    to run that cleanup command later."""
    def naming(program: bytes = b"") -> list[int]:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                argv = cmdline.read_bytes()
            except OSError:
                continue
            if str(path).encode() in argv and argv.split(b"\0")[0].endswith(program):
                found.append(int(cmdline.parent.name))
        return [pid for pid in found if pid != os.getpid()]

    for pid in naming(b"conmon"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while naming() and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in naming():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _mounts() -> list[str]:
    return [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]


def _unmount_below(*roots: Path) -> None:
    """What a stopped engine leaves mounted under its directories, deepest first."""
    below = [m for m in _mounts() if m.startswith(tuple(str(r) + "/" for r in roots))]
    for point in sorted(below, key=len, reverse=True):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)


def test_the_engines_own_disk_full_with_no_ceiling_is_host_pressure(
    make_task: MakeTask, tmp_path: Path, engine_on_a_small_disk: str
) -> None:
    """An uncapped trial writes until the engine's disk is full, waits, cleans up and fails.
    No ceiling of its own was hit: the disk under its writable layer ran out, which the engine's
    free space shows. Before: failed/tests_failed, booked against the agent."""
    from levelfield.sandbox import BackendOptions, oci

    root = make_task("fill", solve=FILL_THE_ENGINE, agent_timeout=120)
    run_id = f"disk-{os.getpid()}"
    backend = oci.OciBackend(BackendOptions(run_id, tmp_path), oci.OciSettings(
        base_url=engine_on_a_small_disk))  # fmt: skip
    try:
        record = _run(backend, load_task(root), "uncapped", tmp_path / "run")
    finally:
        backend.reap(run_id)
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.HOST_PRESSURE)
    assert record.limits["storage_ceiling_bytes"] is None and record.evidence.host_disk_full
    assert (record.evidence.host_disk_free_min_bytes or 0) < (ENGINE_DISK_MB << 20) * 0.05
    assert "No space left on device" in (record.agent_phase.output_tail if record.agent_phase
                                         else "")  # fmt: skip
    (note,) = [n for n in record.evidence.notes if n.startswith("the host filesystem taking")]
    assert "the host's or the engine's disk ran out" in note
