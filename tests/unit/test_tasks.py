from pathlib import Path

import pytest

from levelfield.errors import TaskError
from levelfield.tasks import load_dataset, load_task

from ..conftest import TB2_SAMPLE, MakeTask

MIB = 1 << 20


def test_spec_becomes_bytes_once(make_task: MakeTask) -> None:
    task = load_task(make_task(memory_mb=100, storage_mb=50, cpus=0.5))
    assert (task.spec.memory_bytes, task.spec.storage_bytes, task.spec.cpus) == (
        100 * MIB,
        50 * MIB,
        0.5,
    )
    assert task.agent_timeout_s == 30 and str(task.workdir) == "/app"


@pytest.mark.skipif(not TB2_SAMPLE.is_dir(), reason="../shared/tb2-sample not beside the repo")
def test_terminal_bench_sample_loads_with_its_string_sizes() -> None:
    dataset = load_dataset(TB2_SAMPLE)
    assert len(dataset.tasks) == 8 and not dataset.problems
    spec = dataset.by_name()["regex-log"].spec
    assert (spec.cpus, spec.memory_bytes, spec.storage_bytes) == (1.0, 2 << 30, 10 << 30)
    assert dataset.by_name()["regex-log"].verifier_timeout_s == 900


def test_malformed_task_names_file_and_field_and_spares_the_others(make_task: MakeTask) -> None:
    make_task("good")
    bad = make_task("bad")
    (bad / "task.toml").write_text("[environment]\nmemory_mb = -5\n")
    dataset = load_dataset(bad.parent)
    assert [t.name for t in dataset.tasks] == ["good"]
    (problem,) = dataset.problems
    assert "task.toml" in problem.message and "environment.memory_mb" in problem.message


def test_invalid_toml_and_missing_test_are_problems(make_task: MakeTask) -> None:
    broken = make_task("broken")
    (broken / "task.toml").write_text("[environment\n")
    untested = make_task("untested")
    (untested / "tests" / "test.sh").unlink()
    messages = sorted(p.message for p in load_dataset(broken.parent).problems)
    assert "not valid TOML" in messages[0]
    assert "tests/test.sh" in messages[1] and "missing" in messages[1]


def test_unknown_keys_are_tolerated_but_listed(make_task: MakeTask) -> None:
    task = load_task(make_task(extra_toml="[agent.extra]\n[environment.gpu]\ncount = 1\n"))
    assert "environment.gpu" in task.unknown_keys


def test_bad_size_string_is_refused(make_task: MakeTask) -> None:
    root = make_task()
    (root / "task.toml").write_text('[environment]\nmemory = "lots"\n')
    with pytest.raises(TaskError, match="memory"):
        load_task(root)


def test_workdir_comes_from_the_last_dockerfile_workdir(make_task: MakeTask) -> None:
    root = make_task()
    (root / "environment" / "Dockerfile").write_text("FROM x\nWORKDIR /a\nWORKDIR /srv/work\n")
    assert str(load_task(root).workdir) == "/srv/work"


def test_missing_dataset_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="not found"):
        load_dataset(tmp_path / "nowhere")


@pytest.mark.parametrize(
    ("tables", "allow_internet"),
    [
        ({}, None),  # unsaid: each backend's own default
        ({"environment": 'network_mode = "no-network"'}, False),
        ({"environment": 'network_mode = "public"'}, True),
        ({"environment": "allow_internet = false"}, False),
        ({"environment": 'allow_internet = true\nnetwork_mode = "no-network"'}, False),
        ({"environment": "allow_internet = true", "agent": 'network_mode = "no-network"',
          "verifier": 'network_mode = "no-network"'}, False),
    ],
)  # fmt: skip
def test_harbors_network_mode_decides_the_trials_network_over_allow_internet(
    make_task: MakeTask, tables: dict[str, str], allow_internet: bool | None
) -> None:
    """Harbor 0.26 spells the network `network_mode` (per table); `allow_internet` is its older
    spelling, read only where `[environment] network_mode` is not given."""
    root = make_task()
    (root / "task.toml").write_text(
        "".join(
            f"[{name}]\n{tables.get(name, '')}\n" for name in ("environment", "agent", "verifier")
        )
    )
    assert load_task(root).allow_internet is allow_internet


def test_the_task_keeps_its_parsed_toml_and_its_compose_files(make_task: MakeTask) -> None:
    """What harbor.task_features reads to refuse features no backend runs."""
    root = make_task(extra_toml="user = 1000\n", files={"environment/docker-compose.yml": ""})
    task = load_task(root)
    assert task.raw_toml["verifier"]["user"] == 1000
    assert task.compose_files == ("docker-compose.yml",)
    assert load_task(make_task("plain")).compose_files == ()
