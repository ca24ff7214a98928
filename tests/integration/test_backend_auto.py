"""`--backend auto`, the default: each task runs where its environment exists, and a task that
needs an engine is refused before anything is stored when none answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from levelfield.store import reading

from ..conftest import TB2_SAMPLE, MakeTask, missing_sandbox_prerequisites, require
from .test_oci import ENGINES, _engine_problems

NO_ENGINE = "unix:///nonexistent/levelfield-no-engine.sock"


def _levelfield(*args: str, docker_host: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": docker_host, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "levelfield", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def _mixed(make_task: MakeTask) -> Path:
    make_task("on-host")  # declares environment.userland = "host"
    return make_task("in-image", userland=None).parent


def test_with_no_engine_the_image_tasks_are_refused_with_the_setup_command_and_nothing_stored(
    make_task: MakeTask, tmp_path: Path
) -> None:
    dataset = _mixed(make_task)
    out = tmp_path / "run"
    done = _levelfield("run", str(dataset), "--out", str(out), docker_host=NO_ENGINE)
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert "in-image" in message and "on-host" not in message
    assert "scripts/oci_setup.sh" in message and "No trial was run or stored" in message
    assert not out.exists()
    if not TB2_SAMPLE.is_dir():
        require([str(TB2_SAMPLE)], "the TB2 sample")
    tb2 = _levelfield(
        "run", str(TB2_SAMPLE), "--agent", "oracle", "--out", str(out), docker_host=NO_ENGINE
    )
    assert tb2.returncode == 1 and "8 task(s) need a container engine" in tb2.stderr
    assert not out.exists()


def test_uv_shim_on_the_process_backend_is_refused_with_its_reason(
    make_task: MakeTask, tmp_path: Path
) -> None:
    dataset = make_task("on-host").parent
    done = _levelfield(
        "run",
        str(dataset),
        "--backend",
        "process",
        "--uv-shim",
        "--out",
        str(tmp_path / "r"),
        docker_host=NO_ENGINE,
    )
    assert done.returncode == 2
    assert "read-only" in done.stderr and "install uv on the host" in done.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.oci
@pytest.mark.sandbox
def test_with_an_engine_each_task_runs_where_its_environment_is(
    make_task: MakeTask, tmp_path: Path
) -> None:
    require(missing_sandbox_prerequisites(), "a process sandbox")
    url = ENGINES["podman"]
    require(_engine_problems(url, "podman"), "the podman engine")
    dataset = _mixed(make_task)
    check = _levelfield("tasks", "check", str(dataset), docker_host=url)
    assert "oci: its environment is an image (FROM debian:bookworm-slim)" in check.stdout
    assert 'process: task.toml declares environment.userland = "host"' in check.stdout
    out = tmp_path / "run"
    done = _levelfield("run", str(dataset), "--out", str(out), docker_host=url)
    assert done.returncode == 0, done.stderr
    with reading(out) as store:
        got = {r.task: (r.backend, r.outcome.value) for r in store.records()}
        assert store.meta()["backend"] == "auto"
    assert got == {"on-host": ("process", "passed"), "in-image": ("oci", "passed")}


@pytest.mark.oci
@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_doctor_names_the_engine_and_its_version(kind: str) -> None:
    require(_engine_problems(ENGINES[kind], kind), f"the {kind} engine")
    from levelfield.sandbox.oci._engine import engine_report

    version = engine_report(ENGINES[kind]).version
    done = _levelfield("doctor", docker_host=ENGINES[kind])
    first = next(line for line in done.stdout.splitlines() if "container engine" in line)
    assert f"{kind} {version}" in first, done.stdout
    shell = next(line for line in done.stdout.splitlines() if f"agent shell ({kind})" in line)
    assert "CapEff 00000000a80405fb" in shell, shell  # read in a real container's shell
    assert "no-new-privileges on" in shell and "seccomp filter" in shell, shell
