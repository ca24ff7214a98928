"""Harbor 0.26 task features no backend runs are refused before a trial, each reason naming the key
(or file) and the backend; the keys that change nothing levelfield runs, and every TB2 task of the
shared sample, load as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield import adaptive
from levelfield.checks import check_dataset
from levelfield.config import RunConfig
from levelfield.errors import TaskError
from levelfield.harbor.task_features import refusals, refuse_unsupported, without_refused
from levelfield.inspect.config import SandboxConfig, task_of_sample
from levelfield.tasks import load_dataset, load_task

from ..conftest import TB2_SAMPLE, MakeTask, require


def _toml(
    *, root: str = "", env: str = "", agent: str = "", verifier: str = "", tail: str = ""
) -> str:
    """A task.toml with text in each table: make_task's `extra_toml` lands in [verifier] only."""
    return (
        f'version = "1.0"\n{root}\n'
        f'[environment]\nuserland = "host"\nmemory_mb = 64\n{env}\n'
        f"[agent]\ntimeout_sec = 30\n{agent}\n"
        f"[verifier]\ntimeout_sec = 30\n{verifier}\n"
        f"{tail}\n"
    )


def _task_with(make_task: MakeTask, toml: str, files: dict[str, str] | None = None) -> Path:
    root = make_task("t", files=files)
    (root / "task.toml").write_text(toml)
    return root


REFUSED = {
    "compose yaml": ({"files": {"environment/docker-compose.yaml": "services: {}\n"}},
                     "environment/docker-compose.yaml"),
    "compose yml": ({"files": {"environment/docker-compose.yml": "services: {}\n"}},
                    "environment/docker-compose.yml"),
    "separate grader": ({"verifier": 'environment_mode = "separate"'},
                        'verifier.environment_mode = "separate"'),
    "grader environment": ({"tail": "[verifier.environment]\ncpus = 1"}, "[verifier.environment]"),
    "collect hook": ({"tail": '[[verifier.collect]]\ncommand = "true"'}, "[[verifier.collect]]"),
    "steps": ({"tail": '[[steps]]\nname = "one"\n[[steps]]\nname = "two"'}, "[[steps]]"),
    "reward strategy": ({"root": 'multi_step_reward_strategy = "final"'},
                        "multi_step_reward_strategy"),
    "gpus": ({"env": "gpus = 1"}, "environment.gpus = 1"),
    "gpu types": ({"env": 'gpu_types = ["H100"]'}, "environment.gpu_types"),
    "tpu": ({"tail": '[environment.tpu]\ntype = "v6e"\ntopology = "2x2"'}, "environment.tpu"),
    "windows": ({"env": 'os = "windows"'}, "environment.os = 'windows'"),
    "mcp servers": ({"tail": '[[environment.mcp_servers]]\nname = "m"\nurl = "http://m/sse"'},
                    "environment.mcp_servers"),
    "allowlist": ({"env": 'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]'},
                  'environment.network_mode = "allowlist"'),
    "agent allowlist": ({"agent": 'network_mode = "allowlist"\nallowed_hosts = ["pypi.org"]'},
                        'agent.network_mode = "allowlist"'),
    "verifier hosts": ({"verifier": 'allowed_hosts = ["pypi.org"]'}, "verifier.allowed_hosts"),
    "agent offline, verifier open": ({"agent": 'network_mode = "no-network"'},
                                     "agent.network_mode / verifier.network_mode"),
    "legacy offline, verifier open": ({"env": "allow_internet = false",
                                       "verifier": 'network_mode = "public"'},
                                      "agent.network_mode / verifier.network_mode"),
    "agent user": ({"agent": 'user = "nobody"'}, "agent.user = 'nobody'"),
    "verifier user": ({"verifier": "user = 1000"}, "verifier.user = 1000"),
    "verifier env": ({"verifier": 'env = { TOKEN = "${TOKEN}" }'}, "verifier.env"),
    "environment env": ({"env": 'env = { DB_URL = "${DB_URL:-x}" }'}, "environment.env"),
    "healthcheck": ({"tail": '[environment.healthcheck]\ncommand = "true"'},
                    "environment.healthcheck"),
    "skills": ({"env": 'skills_dir = "/skills"'}, "environment.skills_dir"),
}  # fmt: skip


@pytest.mark.parametrize("backend", ["process", "oci"])
@pytest.mark.parametrize(("parts", "key"), REFUSED.values(), ids=REFUSED.keys())
def test_each_unsupported_feature_is_refused_naming_its_key_and_the_backend(
    make_task: MakeTask, parts: dict[str, object], key: str, backend: str
) -> None:
    files = parts.get("files")
    tables = {k: v for k, v in parts.items() if k != "files"}
    task = load_task(_task_with(make_task, _toml(**tables), files))  # type: ignore[arg-type]

    with pytest.raises(TaskError) as refused:
        refuse_unsupported(task, backend)

    message = str(refused.value)
    assert f"{key}:" in message, message
    assert f"levelfield's {backend} backend does not run it" in message, message
    assert len(refusals(task, backend)) == 1, refusals(task, backend)  # that feature, no other


KEPT = {
    "no gpu": {"env": "gpus = 0"},
    "a [task] of any shape": {"tail": '[task]\nname = "not org slash name"\nversion = "2"\n'
                                      'authors = [{ name = "A" }]'},
    "[reward]": {"tail": '[reward]\nkind = "binary"'},
    "solution timeout": {"tail": "[solution]\ntimeout_sec = 120\nenv = {}"},
    "shared grader, empty env": {"verifier": 'environment_mode = "shared"\nenv = {}'},
    "linux in any case": {"env": 'os = "Linux"'},
    "one network for both": {"agent": 'network_mode = "no-network"',
                             "verifier": 'network_mode = "no-network"'},
    "public everywhere": {"env": 'network_mode = "public"'},
}  # fmt: skip


@pytest.mark.parametrize("parts", KEPT.values(), ids=KEPT.keys())
def test_keys_that_change_nothing_levelfield_runs_load_with_no_refusal(
    make_task: MakeTask, parts: dict[str, str]
) -> None:
    task = load_task(_task_with(make_task, _toml(**parts)))
    assert refusals(task, "process") == []
    assert refusals(task, "oci") == []


def test_every_tb2_sample_task_loads_with_no_refusal() -> None:
    require([] if TB2_SAMPLE.is_dir() else [str(TB2_SAMPLE)], "the shared TB2 sample")
    dataset = load_dataset(TB2_SAMPLE)
    assert dataset.problems == ()
    assert len(dataset.tasks) == 8
    for backend in ("process", "oci", "auto"):
        assert without_refused(dataset, backend) == dataset
    assert all(not c.problems for c in check_dataset(TB2_SAMPLE).tasks)


def test_a_refused_task_is_skipped_with_its_reason_and_the_others_kept(
    make_task: MakeTask,
) -> None:
    make_task("good")
    compose = make_task("sidecar", files={"environment/docker-compose.yaml": "services: {}\n"})
    dataset = load_dataset(compose.parent)

    kept = without_refused(dataset, "auto")  # auto names the backend the task is routed to

    assert [t.name for t in kept.tasks] == ["good"]
    (problem,) = kept.problems
    assert problem.path == compose
    assert "environment/docker-compose.yaml" in problem.message
    assert "levelfield's process backend" in problem.message


def test_tasks_check_names_the_refusal_as_a_problem(make_task: MakeTask) -> None:
    make_task("good")
    make_task("gpu", extra_toml='user = "grader"\n')  # lands in [verifier]
    checks = {c.name: c for c in check_dataset(make_task("x").parent).tasks}
    assert checks["good"].problems == [] == checks["x"].problems
    (problem,) = checks["gpu"].problems
    assert "verifier.user = 'grader'" in problem and "process backend" in problem


def test_an_inspect_sample_of_a_refused_task_errs_before_its_sandbox(
    make_task: MakeTask, tmp_path: Path
) -> None:
    root = make_task("grader", extra_toml='environment_mode = "separate"\n')
    with pytest.raises(TaskError, match=r"verifier.environment_mode .*levelfield's oci backend"):
        task_of_sample(SandboxConfig(backend="oci"), {"task_dir": str(root)}, tmp_path, "grader")


def test_an_adaptive_sweep_designs_its_rounds_without_the_refused_task(
    make_task: MakeTask, tmp_path: Path
) -> None:
    """Its rounds are planned from its own task list (then run with `trials=`), so the refusal
    must hold there too, not only in `run`'s own plan."""
    make_task("good")
    grader = make_task("host-env", extra_toml='env = { KEY = "${KEY}" }\n')
    config = RunConfig(
        dataset=grader.parent, out=tmp_path / "run", agents=["oracle"], policies=["strict"]
    )
    tasks, _, _ = adaptive._design(config)
    assert [t.name for t in tasks] == ["good"]
