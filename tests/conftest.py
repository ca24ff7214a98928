"""Shared fixtures: tiny tasks written on the fly, the TB2 sample read from ../shared.

A missing prerequisite (root, bubblewrap, cgroups) skips a sandbox test with its reason on a
laptop, but fails it when CI=true: a green run that skipped every sandbox proves nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import tarfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TB2_SAMPLE = REPO.parent / "shared" / "tb2-sample"
TB2_LEADERBOARD = REPO.parent / "shared" / "tb2-leaderboard" / "submissions.tar.gz"
EXAMPLES = REPO / "examples"


def pytest_configure(config: pytest.Config) -> None:
    """A suite started in the background of a shell (`pytest &`, as CI scripts may) ignores
    SIGINT, and so would every harness it starts: the tests that stop a harness with Ctrl-C
    need the default a terminal gives. (The trials themselves get it either way.)"""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# Started first when the suite runs on several workers (`-n`): the longest groups, so that no
# worker is left with one of them at the end while the others idle.
LONGEST_FIRST = (
    "tests/integration/test_cgroup2_vm.py",
    "tests/hostile/test_hostile.py",
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups from the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """One worker per module (and per value of a module's shared, parametrized fixture, such as
    the engine or the backend): a module's expensive fixtures are then made once, as in a run
    on one process. Under `--dist loadgroup` the groups go to the workers longest first."""
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_worker_group(item)))
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a worker, every test must carry its group: without it xdist spreads a module over
    several workers, and two of them then start the same shared fixture (a Ray cluster, a
    hostile run) side by side, which the tests are not written for."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    lost = [item.nodeid for item in session.items if "@" not in item.nodeid]
    if lost:
        raise pytest.UsageError(
            f"{len(lost)} tests lost their xdist group (first: {lost[0]}): this pytest and "
            "pytest-xdist do not agree on how a group is marked; see pyproject.toml's pin"
        )


def _worker_group(item: pytest.Item) -> str:
    module = item.nodeid.split("::")[0]
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return module
    shared = []
    for name, value in sorted(callspec.params.items()):
        definitions = item._fixtureinfo.name2fixturedefs.get(name, ())  # type: ignore[attr-defined]
        if definitions and definitions[-1].scope in ("module", "package", "session"):
            shared.append(f"{name}={value}")
    return "|".join([module, *shared])


def missing_sandbox_prerequisites() -> list[str]:
    missing = [tool for tool in ("bwrap", "nsenter", "mkfs.ext4") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root")
    if (
        not Path("/sys/fs/cgroup/memory").is_dir()
        and not Path("/sys/fs/cgroup/cgroup.controllers").is_file()
    ):
        missing.append("cgroups")
    return missing


def require(condition_missing: list[str], what: str) -> None:
    if not condition_missing:
        return
    message = f"{what} needs: {', '.join(condition_missing)}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: prerequisites must be installed, not skipped)")
    pytest.skip(message)


@pytest.fixture(autouse=True)
def _sandbox_prerequisites(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("sandbox"):
        require(missing_sandbox_prerequisites(), "a process sandbox")


@pytest.fixture(autouse=True)
def _expected_cgroup_version() -> None:
    """Inside the VM, a test that found cgroup v1 would prove nothing about v2."""
    expected = os.environ.get("LEVELFIELD_EXPECT_CGROUP")
    if expected:
        from levelfield.sandbox.cgroups import detect

        assert detect().version == int(expected), f"expected cgroup v{expected} here"


MakeTask = Callable[..., Path]


@pytest.fixture
def make_task(tmp_path: Path) -> MakeTask:
    """Writes a Harbor-format task; `solve` and `test` are bash bodies (test defaults to
    checking /app/done exists). It declares the host's userland (the process backend under
    --backend auto) unless `userland` says otherwise."""

    def make(
        name: str = "t",
        *,
        solve: str = "touch /app/done",
        test: str | None = None,
        memory_mb: int = 64,
        cpus: float = 1,
        storage_mb: int = 64,
        agent_timeout: float = 30,
        verifier_timeout: float = 30,
        extra_toml: str = "",
        files: dict[str, str] | None = None,
        userland: str | None = "host",
    ) -> Path:
        root = tmp_path / "dataset" / name
        for part in ("environment", "tests", "solution"):
            (root / part).mkdir(parents=True, exist_ok=True)
        (root / "task.toml").write_text(
            textwrap.dedent(f"""\
            version = "1.0"
            [environment]
            {f'userland = "{userland}"' if userland else ""}
            cpus = {cpus}
            memory_mb = {memory_mb}
            storage_mb = {storage_mb}
            [agent]
            timeout_sec = {agent_timeout}
            [verifier]
            timeout_sec = {verifier_timeout}
            """)
            + extra_toml
        )
        (root / "instruction.md").write_text(f"Task {name}.\n")
        (root / "environment" / "Dockerfile").write_text(
            "FROM debian:bookworm-slim\nWORKDIR /app\n"
        )
        (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve}\n")
        default_test = "test -e /app/done"
        (root / "tests" / "test.sh").write_text(
            "#!/bin/bash\n"
            f"if {{ {test or default_test}; }}; then echo 1 > /logs/verifier/reward.txt; "
            "else echo 0 > /logs/verifier/reward.txt; fi\n"
        )
        for rel, content in (files or {}).items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(content)
        return root

    return make


def require_leaderboard() -> None:
    require([] if TB2_LEADERBOARD.is_file() else [str(TB2_LEADERBOARD)], "the shared leaderboard")


@pytest.fixture(scope="session")
def tb2_leaderboard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 55 shared Terminal-Bench 2.0 leaderboard submissions (Harbor trial files), extracted
    once per session into a temporary directory: `<submission>/<job>/<trial>/result.json`."""
    require_leaderboard()
    root = tmp_path_factory.mktemp("tb2-leaderboard")
    with tarfile.open(TB2_LEADERBOARD) as archive:
        archive.extractall(root, filter="data")
    return root
