"""Where `--backend auto` sends a task, and the pinned image's name and digest arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield.errors import HostUnsupported, RunConfigError
from levelfield.records import TrialRecord
from levelfield.sandbox import auto
from levelfield.sandbox.oci._pull import _split, repo_digest
from levelfield.tasks import load_task

from ..conftest import MakeTask


def _with_image(root: Path, image: str) -> Path:
    toml = root / "task.toml"
    toml.write_text(
        toml.read_text().replace("[environment]\n", f'[environment]\ndocker_image = "{image}"\n')
    )
    return root


def test_a_task_declaring_the_host_userland_runs_on_process(make_task: MakeTask) -> None:
    route = auto.route_task(load_task(make_task("host")))
    assert route == auto.Route("process", 'task.toml declares environment.userland = "host"')


def test_an_image_task_runs_on_oci_and_says_which_image(make_task: MakeTask) -> None:
    root = _with_image(make_task("img", userland=None), "alexgshaw/img:20251031")
    route = auto.route_task(load_task(root))
    assert route.backend == "oci"
    assert "FROM debian:bookworm-slim" in route.why and "alexgshaw/img:20251031" in route.why


def test_a_task_naming_no_image_runs_on_process(make_task: MakeTask) -> None:
    root = make_task("bare", userland=None)
    (root / "environment" / "Dockerfile").unlink()
    assert auto.route_task(load_task(root)).backend == "process"


def test_userland_is_validated(make_task: MakeTask) -> None:
    from levelfield.errors import TaskError

    root = make_task("odd", userland="hots")
    with pytest.raises(TaskError, match="userland"):
        load_task(root)


def test_no_engine_refuses_image_tasks_and_uv_shim_refuses_host_tasks(
    make_task: MakeTask, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/levelfield.sock")
    host, image = load_task(make_task("h")), load_task(make_task("i", userland=None))
    auto.refuse_unrunnable([host])  # nothing needs an engine
    with pytest.raises(HostUnsupported, match=r"1 task\(s\) need a container engine.*: i\."):
        auto.refuse_unrunnable([host, image])
    with pytest.raises(RunConfigError, match="h run on the process backend"):
        auto.refuse_unrunnable([host], uv_shim=True)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("alexgshaw/regex-log:20251031", ("alexgshaw/regex-log", "20251031")),
        ("127.0.0.1:5000/alexgshaw/x:20251031", ("127.0.0.1:5000/alexgshaw/x", "20251031")),
        ("127.0.0.1:5000/alexgshaw/x", ("127.0.0.1:5000/alexgshaw/x", "latest")),
        ("ubuntu@sha256:abc", ("ubuntu", "sha256:abc")),
    ],
)
def test_image_names_split_into_repository_and_tag(name: str, expected: tuple[str, str]) -> None:
    assert _split(name) == expected


def test_the_recorded_digest_is_the_one_of_the_pulled_repository() -> None:
    found = {"RepoDigests": ["other/x@sha256:aaa", "docker.io/alexgshaw/x@sha256:bbb"]}
    assert repo_digest(found, "alexgshaw/x:20251031") == "sha256:bbb"
    assert repo_digest({"RepoDigests": []}, "alexgshaw/x:1") is None


def test_a_record_stored_before_images_were_recorded_still_loads() -> None:
    from .test_store import record

    old = record("k").model_dump(mode="json")
    old.pop("image", None)
    old["evidence"].pop("engine_oom_killed", None)
    loaded = TrialRecord.model_validate(old)
    assert loaded.image is None and loaded.evidence.engine_oom_killed is None
