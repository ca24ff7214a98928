"""Real containers on the `oci` backend (podman or Docker): limits, evidence, cleanup, TB2 oracles.

Needs an engine answering on DOCKER_HOST or a usual socket (scripts/oci_setup.sh starts podman's)
and the stand-in bases, which the session fixture builds or finds cached.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from levelfield.plan import plan_trials
from levelfield.policy import PRESETS, apply_policy
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.runner import TrialContext, run_trial
from levelfield.sandbox import BackendOptions, grader
from levelfield.tasks import Task, load_task

from ..conftest import TB2_SAMPLE, MakeTask, require

pytestmark = pytest.mark.oci

PYTHON_BASE = "FROM python:3.13-slim-bookworm\nWORKDIR /app\n"
# Touches every page (b"x" * n), unlike bytes(n), whose zero pages cost no memory.
ALLOC_THEN_MARK = 'python3 -c \'b = b"x" * ({mb} << 20); open("/app/done", "w").write("ok")\''
# bn-fit-modify needs its dataset and CRAN at build time, which no registry here serves.
TB2_OFFLINE = [
    "cancel-async-tasks",
    "kv-store-grpc",
    "largest-eigenval",
    "log-summary-date-ranges",
    "openssl-selfsigned-cert",
    "prove-plus-comm",
    "regex-log",
]


# Each engine on the socket its setup script serves: scripts/oci_setup.sh (podman) and
# scripts/docker_setup.sh (Debian's docker.io); every test below runs against both.
ENGINES = {
    "podman": "unix:///run/podman/podman.sock",
    "docker": "unix:///run/levelfield-docker.sock",
}


def _engine_problems(url: str | None = None, kind: str | None = None) -> list[str]:
    """Why the engine at `url` (default: the one levelfield would find) cannot serve, if
    `kind` is given, as that engine."""
    try:
        from levelfield.sandbox import oci
    except ImportError as exc:
        return [f"the oci extra ({exc})"]
    report = oci.engine_report(url)
    if report.found and kind is not None and report.engine != kind:
        return [f"{url} serves {report.engine}, not {kind}"]
    return list(report.problems)


@pytest.fixture(scope="session", params=sorted(ENGINES))
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    """The engine under test, as DOCKER_HOST for this process and the harnesses it starts."""
    url = ENGINES[request.param]
    require(_engine_problems(url, request.param), f"the {request.param} engine")
    saved = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = url
    yield request.param
    if saved is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = saved


@pytest.fixture(scope="session")
def stand_ins(engine: str) -> str:
    """The offline bases in this engine (cached after the first build on a machine: seconds)."""
    from levelfield.sandbox import oci

    oci.build_offline_bases(log=lambda line: print(f"offline-bases ({engine}): {line}"))
    return engine


@pytest.fixture
def backend(tmp_path: Path, stand_ins: str) -> Iterator[object]:
    from levelfield.sandbox import oci

    run_id = f"t{os.getpid()}-{tmp_path.name[-12:]}"
    box = oci.OciBackend(BackendOptions(run_id, tmp_path), oci.OciSettings(uv_shim=True))
    yield box
    box.reap(run_id)


def _run(backend: object, task: Task, policy: str, run_dir: Path) -> TrialRecord:
    (trial,) = plan_trials([task], ["oracle"], [PRESETS[policy]])
    ctx = TrialContext(backend.options.run_id, run_dir, "oci")  # type: ignore[attr-defined]
    return run_trial(trial, backend, ctx)  # type: ignore[arg-type]


def _image_task(make_task: MakeTask, name: str, image: str, test: str, solve: str = "true") -> Task:
    """A task built FROM `image`, with `test` as its test.sh."""
    task_dir = make_task(name, test=None, userland=None, memory_mb=256, solve=solve)
    (task_dir / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
    (task_dir / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
    return load_task(task_dir)


def _containers(run_id: str) -> list[str]:
    from levelfield.sandbox import oci

    api = oci.OciBackend(BackendOptions(run_id, Path("/tmp"))).client.api
    return [
        c["Id"] for c in api.containers(all=True, filters={"label": f"levelfield.run={run_id}"})
    ]


def test_oracle_passes_in_a_container_built_from_a_local_base(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    task = load_task(make_task("tiny", solve="echo hello > /app/done"))
    record = _run(backend, task, "strict", tmp_path / "run")
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), record.error
    notes = " ".join(record.evidence.notes)
    assert "mem_limit=67108864" in notes and "memswap_limit=67108864" in notes
    assert "stand-in base" in notes  # which offline base the image was built on
    assert (tmp_path / "run" / "trials" / record.trial_key / "logs" / "verifier").is_dir()
    assert _containers(backend.options.run_id) == []  # type: ignore[attr-defined]


def test_twice_the_spec_is_oom_killed_under_strict_and_passes_uncapped(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    root = make_task(
        "spike",
        solve=ALLOC_THEN_MARK.format(mb=128),
        memory_mb=64,
        files={"environment/Dockerfile": PYTHON_BASE},
    )
    task = load_task(root)
    strict = _run(backend, task, "strict", tmp_path / "strict")
    assert (strict.outcome, strict.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
    assert strict.evidence.oom_kills >= 1  # from memory.oom_control, not the engine's OOMKilled
    # Beside it, the engine's own flag: Docker sets it; Podman on cgroup v1 reports false.
    assert strict.evidence.engine_oom_killed is (backend.report().engine == "docker")  # type: ignore[attr-defined]
    assert strict.agent_phase is not None and strict.agent_phase.exit_code == 137
    uncapped = _run(backend, task, "uncapped", tmp_path / "uncapped")
    assert (uncapped.outcome, uncapped.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    assert uncapped.evidence.oom_kills == 0
    assert (uncapped.evidence.memory_peak_bytes or 0) > 128 << 20
    assert "unset: mem_limit, memswap_limit, nano_cpus" in " ".join(uncapped.evidence.notes)


def test_storage_ceiling_on_a_loop_mounted_disk_is_storage_exhausted(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """Overlay here has no xfs pquota, so the engine refuses --storage-opt size: the container's
    whole writable layer lives on an ext4 disk of exactly the ceiling, the image's own /app
    seen through it. The cap holds for every path: a write to /root fills the same disk."""
    from levelfield.sandbox.disks import mounted_images

    dockerfile = "FROM debian:bookworm-slim\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n"
    fill = "dd if=/dev/zero of=/root/blob bs=1M count=40 && touch /app/done"
    root = make_task(
        "disk",
        solve=fill,
        storage_mb=24,
        test="test -e /app/done && grep -q seeded /app/seed.txt",
        files={"environment/Dockerfile": dockerfile, "environment/seed.txt": "seeded\n"},
    )
    task = load_task(root)
    strict = _run(backend, task, "strict", tmp_path / "strict")
    assert (strict.outcome, strict.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED), (
        strict.error
    )
    assert strict.evidence.storage_full and strict.evidence.storage_ceiling_bytes == 24 << 20
    assert "writable layer on a loop-mounted ext4" in " ".join(strict.evidence.notes)
    assert "No space left on device" in (
        strict.agent_phase.output_tail if strict.agent_phase else ""
    )
    roomy = _run(backend, task, "headroom", tmp_path / "headroom")  # 72 MiB: the image's seed.txt
    assert (roomy.outcome, roomy.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), roomy.error
    assert 40 << 20 <= (roomy.evidence.storage_used_bytes or 0) <= 72 << 20
    assert mounted_images(tmp_path.resolve()) == []
    assert list(tmp_path.glob("*/trials/*/disk.img")) == []


def test_a_failed_build_is_a_sandbox_error_with_the_build_log_tail(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    broken = "FROM debian:bookworm-slim\nRUN echo doomed-step && exit 3\nWORKDIR /app\n"
    task = load_task(make_task("broken", files={"environment/Dockerfile": broken}))
    record = _run(backend, task, "strict", tmp_path / "run")
    assert (record.outcome, record.reason) == (Outcome.INFRA_ERROR, Reason.SANDBOX_ERROR)
    assert record.error is not None and "doomed-step" in record.error


def test_sandbox_exec_timeout_signal_copy_and_background_processes(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    task = load_task(make_task("box"))
    limits = apply_policy(PRESETS["headroom"], task.spec)
    box = backend.start(task, limits, trial_id="box", trial_dir=tmp_path)  # type: ignore[attr-defined]
    try:
        # Limits as applied: the engine's HostConfig and the kernel's own cgroup files.
        host = box.api.inspect_container(box.container_id)["HostConfig"]
        ceiling = limits.memory_ceiling_bytes
        assert host["Memory"] == host["MemorySwap"] == ceiling
        assert host["PidsLimit"] == limits.pids_max
        cpus = min(limits.cpu_ceiling or 0, os.cpu_count() or 1)
        assert host["NanoCpus"] == int(cpus * 1_000_000_000)
        memory_dir = box.cgroup.dirs["unified" if box.cgroup.is_v2 else "memory"]
        limit_file = "memory.max" if box.cgroup.is_v2 else "memory.limit_in_bytes"
        assert int((memory_dir / limit_file).read_text()) == ceiling
        # The floor holds on a loaded host: the engine's parent weighs as the host's CPUs.
        cpu_dir = box.cgroup.dirs["unified" if box.cgroup.is_v2 else "cpu"]
        weight_file, host_weight = (
            ("cpu.weight", 100 * (os.cpu_count() or 1))
            if box.cgroup.is_v2
            else ("cpu.shares", 1024 * (os.cpu_count() or 1))
        )
        assert int((cpu_dir.parent / weight_file).read_text()) == host_weight
        log = tmp_path / "exec.log"
        slow = box.exec("echo started; sleep 30", timeout_s=1, log_path=log)
        assert slow.timed_out and slow.exit_code is None and slow.duration_s < 5
        killed = box.exec("kill -9 $$", timeout_s=10, log_path=log)
        assert (killed.exit_code, killed.signal) == (137, 9)
        daemon = box.exec(
            "sleep 300 >/dev/null 2>&1 & echo $! > /tmp/pid", timeout_s=10, log_path=log
        )
        assert daemon.exit_code == 0 and daemon.duration_s < 5  # no wait for the child's stdout
        alive = box.exec('kill -0 "$(cat /tmp/pid)" && pwd', timeout_s=10, log_path=log)
        assert alive.exit_code == 0 and alive.output_tail.strip().endswith("/app")
        assert "started" not in alive.output_tail  # each exec's own output, not the shared log's
        (tmp_path / "tests").mkdir()
        (tmp_path / "tests" / "a.txt").write_text("fresh")
        box.exec("mkdir -p /tests && echo stale > /tests/old", timeout_s=10, log_path=log)
        box.copy_in(tmp_path / "tests", PurePosixPath("/tests"))
        assert box.read_file(PurePosixPath("/tests/a.txt")) == b"fresh"
        assert box.read_file(PurePosixPath("/tests/old")) is None
        assert box.read_file(PurePosixPath("/nope")) is None
        box.exec(
            ". $HOME/.local/bin/env && uv --version > /logs/verifier/uv.txt",
            timeout_s=20,
            log_path=log,
        )
        box.collect_logs(tmp_path / "logs")
        assert (tmp_path / "logs" / "verifier" / "uv.txt").read_text().startswith("uv ")
        assert box.usage().memory_bytes > 0
        assert "started" in log.read_text()
    finally:
        box.close()


_HARNESS = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from levelfield.policy import PRESETS, apply_policy
    from levelfield.sandbox import BackendOptions, oci
    from levelfield.tasks import load_task
    task = load_task(Path(sys.argv[1]))
    backend = oci.OciBackend(BackendOptions(sys.argv[2], Path(sys.argv[3])))
    box = backend.start(task, apply_policy(PRESETS["strict"], task.spec), trial_id="doomed",
                        trial_dir=Path(sys.argv[3]))
    print("started", flush=True)
    box.exec("sleep 300", timeout_s=600, log_path=Path(sys.argv[3]) / "agent.log")
""")


def test_kill_9_of_the_harness_then_reap_leaves_no_container(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    task_root = make_task("doomed")
    run_id = f"doomed-{os.getpid()}"
    script = tmp_path / "harness.py"
    script.write_text(_HARNESS)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(task_root), run_id, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(_containers(run_id)) == 1  # the dead harness left its container running
    from levelfield.sandbox import oci
    from levelfield.sandbox.disks import mounted_images

    assert mounted_images(tmp_path.resolve())  # and its storage disk, on the container's layer
    assert oci.OciBackend(BackendOptions(run_id, tmp_path)).reap(run_id) >= 1
    assert _containers(run_id) == []
    assert mounted_images(tmp_path.resolve()) == []  # found by its image, wherever mounted
    assert list(tmp_path.glob("trials/*/disk.img")) == []


LOADS_JSON = """python3 -c 'import json.decoder'
python3 -v -c 'import json.decoder' 2> /logs/verifier/imports.txt
echo 1 > /logs/verifier/reward.txt
"""


def test_the_graders_python_caches_its_bytecode_in_a_folder_of_its_own(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """The grader's Python reads no bytecode from the agent's filesystem (the agent can write a
    .pyc beside any module): it compiles into a cache of its own, off the witnessed disk, and
    the next start reads it from there."""
    task = _image_task(make_task, "bytecode", "python:3.13-slim-bookworm", LOADS_JSON)
    record = _run(backend, task, "strict", tmp_path / "run")
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), record.error
    trial = tmp_path / "run" / "trials" / record.trial_key
    imports = (trial / "logs" / "verifier" / "imports.txt").read_text()
    cached = f"{grader.BYTECODE}/usr/local/lib/python3.13/json/decoder"
    assert f"code object from '{cached}.cpython-313.pyc'" in imports, imports[-3000:]
    assert "/usr/local/lib/python3.13/json/__pycache__" not in imports
    assert not (trial / grader.BYTECODE_DIR).exists()  # gone with the grader's disk


# What Terminal-Bench 2.0's headless-terminal and path-tracing tests do: make a folder at the top
# of the filesystem, and start a login shell that must read the .bashrc they appended to;
# path-tracing-reverse's renames a file from /app to /tmp (os.rename: no copy on EXDEV). A file
# the agent wrote at the top is the grader's to read; a pytest.ini it put there is not.
TASKS_WORLD = """mkdir /server && echo hi > /server/index.html
echo 'export SPECIAL=from-bashrc' >> "$HOME/.bashrc"
bash -lic 'echo "$SPECIAL"' 2>/dev/null > /logs/verifier/login.txt
cat /server/index.html >> /logs/verifier/login.txt
perl -e 'rename("/app/mystery", "/tmp/mystery") or die "rename: $!\\n"' 2>> /logs/verifier/login.txt
cat /tmp/mystery /answer.txt >> /logs/verifier/login.txt
[ -s /pytest.ini ] && echo "the agent's pytest.ini" >> /logs/verifier/login.txt
[ -e /app/ran-agents-profile ] && echo "the agent's .profile ran" >> /logs/verifier/login.txt
echo 1 > /logs/verifier/reward.txt
"""


def test_the_graders_world_is_the_tasks_a_writable_root_and_the_images_home(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """A right solution is not failed for the grader's furniture: its root takes a new folder,
    as the container's does, and its fresh HOME holds the image's shell start-up files (a login
    shell reads .profile, which reads .bashrc), never the agent's."""
    planted = ("echo 'echo planted > /app/ran-agents-profile' >> ~/.profile; "
               "echo mystery > /app/mystery; echo 42 > /answer.txt; echo '[pytest]' > /pytest.ini")
    task = _image_task(make_task, "world", "debian:bookworm-slim", TASKS_WORLD, solve=planted)
    # Under the storage ceiling: the whole writable layer is on the ceiling's one disk, so the
    # rename from /app to /tmp stays within one filesystem (no EXDEV).
    record = _run(backend, task, "strict", tmp_path / "run")
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), record.error
    trial = tmp_path / "run" / "trials" / record.trial_key
    said = (trial / "logs" / "verifier" / "login.txt").read_text()
    assert said == "from-bashrc\nhi\nmystery\n42\n", said


def test_a_link_where_the_grader_mounts_its_own_is_the_agents_doing(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """The grader's root is the container's: a link the agent put at /tests, or at a test
    runner's configuration name at the top, would lead the grader's mounts, or pytest, into the
    agent's files. The grader does not start, and the trial is the agent's failure, not infra."""
    solve = "mkdir -p /app/mine && ln -s /app/mine /tests && ln -s /app/mine/x.ini /pytest.ini"
    task = _image_task(make_task, "linked", "debian:bookworm-slim", TASKS_WORLD, solve=solve)
    record = _run(backend, task, "strict", tmp_path / "run")
    assert (record.outcome, record.reason) == (Outcome.FAILED, Reason.GRADER_BROKEN), record.error
    said = " | ".join(record.evidence.notes)
    assert "because of the agent" in said, said
    assert "where it mounts its own: /tests, /pytest.ini" in said, said


@pytest.mark.slow
@pytest.mark.parametrize("name", TB2_OFFLINE)
def test_tb2_oracle_passes_under_headroom(name: str, backend: object, tmp_path: Path) -> None:
    if not (TB2_SAMPLE / name).is_dir():
        require([f"{TB2_SAMPLE / name}"], "the TB2 sample")
    # The verifiers install pytest from PyPI and curl with apt: they need the network, as in
    # Harbor, whose task.toml default is allow_internet = true.
    task = dataclasses.replace(load_task(TB2_SAMPLE / name), allow_internet=True)
    record = _run(backend, task, "headroom", tmp_path / "run")
    tail = record.verifier_phase.output_tail if record.verifier_phase else record.error
    assert (record.outcome, record.reward) == (Outcome.PASSED, 1.0), tail


def test_kill_9_mid_run_then_resume_runs_every_trial_once_with_no_container_left(
    make_task: MakeTask, stand_ins: str, tmp_path: Path
) -> None:
    from levelfield.store import reading

    from ._helpers import stored_count

    for name in ("a", "b"):
        root = make_task(name, solve="sleep 2; touch /app/done")
    out = tmp_path / "run"
    command = [
        sys.executable,
        "-m",
        "levelfield",
        "run",
        str(root.parent),
        "--backend",
        "oci",
        "--repeats",
        "3",
        "--concurrency",
        "2",
        "--out",
        str(out),
    ]
    harness = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while stored_count(out) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # a trial or two in flight, in their containers
    harness.send_signal(signal.SIGKILL)
    harness.wait()
    with reading(out) as store:
        run_id = store.meta()["run_id"]
    interrupted = stored_count(out)
    assert 1 <= interrupted < 6
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    with reading(out) as store:
        keys = [r.trial_key for r in store.records()]
        assert all(r.outcome is Outcome.PASSED for r in store.records())
    assert len(keys) == len(set(keys)) == 6
    assert _containers(run_id) == []


def test_the_engines_diff_is_read_as_a_stream_and_kept_where_the_grader_looks(
    make_task: MakeTask, backend: object, tmp_path: Path
) -> None:
    """Twenty thousand files in /app and a pip.conf in /etc: the sandbox's changes are the
    engine's own diff (its whole answer, as the SDK reads it) less what the grader never reads."""
    from levelfield.sandbox.oci._changes import kept

    task = load_task(make_task("diff", storage_mb=256))  # 65,536 inodes
    limits = apply_policy(PRESETS["strict"], task.spec)
    box = backend.start(task, limits, trial_id="diff", trial_dir=tmp_path / "t")  # type: ignore[attr-defined]
    try:
        plant = "mkdir /app/junk && cd /app/junk && seq 20000 | xargs touch; echo x > /etc/pip.conf"
        assert box.exec(plant, timeout_s=120, log_path=tmp_path / "agent.log").exit_code == 0
        whole = [(c["Path"], int(c["Kind"])) for c in box.api.diff(box.container_id)]
        assert len(whole) > 20000
        read = box.changes()
        assert sorted(read) == sorted((path, kind) for path, kind in whole if kept(path))
        assert ("/etc/pip.conf", 1) in read and not any(p.startswith("/app/junk/") for p, _ in read)
    finally:
        box.close()
