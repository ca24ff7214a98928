"""Pinned prebuilt images through a real OCI registry on loopback (Debian's docker-registry),
on the Docker Engine: the pull, its recorded digest, a registry that is down, a tag that moved.

Docker treats 127.0.0.0/8 registries as insecure-allowed; podman's compat API would need a
registries.conf entry per port, so these run on Docker (scripts/docker_setup.sh).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from levelfield.errors import SandboxStartError
from levelfield.records import Outcome, Reason
from levelfield.store import reading

from ..conftest import MakeTask, require
from ._helpers import run_records, stored_count
from .test_oci import ENGINES, _engine_problems

pytestmark = pytest.mark.oci
DOCKER = ENGINES["docker"]
STAND_IN = "debian:bookworm-slim"  # a stand-in base the setup script built in Docker


@dataclass
class Registry:
    address: str
    process: subprocess.Popen[bytes] | None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def docker_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    require(_engine_problems(DOCKER, "docker"), "the docker engine")
    import docker

    monkeypatch.setenv("DOCKER_HOST", DOCKER)
    client = docker.DockerClient(base_url=DOCKER)
    yield client
    client.close()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    binary = shutil.which("docker-registry")
    require([] if binary else ["docker-registry (Debian package)"], "an OCI registry")
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage: {{filesystem: {{rootdirectory: {tmp_path / 'blobs'}}}}}\n"
        f"http: {{addr: '127.0.0.1:{port}'}}\n"
    )
    log = open(tmp_path / "registry.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([str(binary), "serve", str(config)], stdout=log, stderr=log)
    registry = Registry(f"127.0.0.1:{port}", process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # ready when it accepts a connection
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield registry
    registry.stop()
    log.close()


def _push(client: object, source: str, name: str, marker: str | None = None) -> str:
    """Tag `source` (plus a file layer if `marker`) as `name`, push it; return its digest."""
    api = client.api  # type: ignore[attr-defined]
    if marker is not None:
        container = api.create_container(source, ["sh", "-c", f"echo {marker} > /marker"])
        api.start(container)
        api.wait(container)
        api.commit(container, repository=name.rsplit(":", 1)[0], tag=name.rsplit(":", 1)[1])
        api.remove_container(container)
    else:
        api.tag(source, name.rsplit(":", 1)[0], name.rsplit(":", 1)[1])
    digest = ""
    for chunk in api.push(
        name.rsplit(":", 1)[0], tag=name.rsplit(":", 1)[1], stream=True, decode=True
    ):
        assert "error" not in chunk, chunk
        digest = (chunk.get("aux") or {}).get("Digest", digest)
    api.remove_image(name, force=True)  # the trial must pull it, not find it
    assert digest.startswith("sha256:")
    return digest


def _pinned_task(make_task: MakeTask, name: str, image: str, **kw: object) -> Path:
    root = make_task(name, userland=None, **kw)
    toml = root / "task.toml"
    toml.write_text(
        toml.read_text().replace("[environment]\n", f'[environment]\ndocker_image = "{image}"\n')
    )
    return root


def test_a_trial_pulls_the_pinned_image_and_records_its_digest(
    make_task: MakeTask, docker_client: object, registry: Registry, tmp_path: Path
) -> None:
    image = f"{registry.address}/alexgshaw/pinned-task:20251031"
    digest = _push(docker_client, STAND_IN, image)
    root = _pinned_task(make_task, "pinned-task", image)
    (record,) = run_records(root, tmp_path / "run")  # --backend auto, --image auto
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED), record.error
    assert record.backend == "oci"
    assert record.image is not None
    assert (record.image.name, record.image.source, record.image.digest) == (
        image,
        "pulled",
        digest,
    )


def test_a_registry_that_is_down_stops_prebuilt_before_any_trial_and_auto_builds(
    make_task: MakeTask, docker_client: object, registry: Registry, tmp_path: Path
) -> None:
    image = f"{registry.address}/alexgshaw/down-task:20251031"
    _push(docker_client, STAND_IN, image)
    registry.stop()
    root = _pinned_task(make_task, "down-task", image)
    with pytest.raises(SandboxStartError, match=r"sandbox_error before any trial.*down-task"):
        run_records(root, tmp_path / "prebuilt", image="prebuilt")
    assert stored_count(tmp_path / "prebuilt") == 0
    (record,) = run_records(root, tmp_path / "auto", image="auto")
    assert record.outcome is Outcome.PASSED, record.error
    assert record.image is not None and record.image.source == "built"
    assert any("built: prebuilt image" in note for note in record.evidence.notes)


def test_a_tag_moved_between_two_invocations_of_a_sweep_is_flagged(
    make_task: MakeTask, docker_client: object, registry: Registry, tmp_path: Path
) -> None:
    from levelfield.analysis.summary import summarize
    from levelfield.analysis.table import load_run
    from levelfield.report.markdown import render_card

    image = f"{registry.address}/alexgshaw/moving-task:20251031"
    first = _push(docker_client, STAND_IN, image)
    root = _pinned_task(make_task, "moving-task", image)
    out = tmp_path / "sweep"
    run_records(root, out, image="prebuilt", window="monday")
    second = _push(docker_client, STAND_IN, image, marker="rebuilt")
    assert second != first
    records = run_records(root, out, image="prebuilt", window="tuesday")
    assert sorted(r.image.digest for r in records if r.image) == sorted([first, second])
    data = load_run(out)
    summary = summarize(data.trials, info=data.info)
    (drift,) = summary.provenance.image_drift
    assert image in drift and first[:19] in drift and second[:19] in drift
    card = render_card(summary)
    assert "Image drift" in card and "prebuilt, pulled: 2 trials" in card
    assert "| agent's capabilities | Docker's default set less net_raw" in card
    with reading(out) as store:
        assert store.count() == 2
    docker_client.api.remove_image(image, force=True)  # type: ignore[attr-defined]
