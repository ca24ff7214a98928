"""The bundled noise suite (examples/noise-suite) under real enforcement: the facts of it that do
not depend on chance or on host load.

Spike tasks draw their peak per run and CPU tasks race a timeout, so neither is asserted here;
what is asserted is what the kernel must decide the same way every time: a control task passes
at 1x, a hungry strategy peaking at ~4.8x its spec is OOM-killed at 3x and passes uncapped, a
hungry-but-wrong path (~2x) is OOM-killed at 1x and fails its tests at 3x (the trials that "would
have failed anyway"), and a task staging 56 MiB on a 32 MiB disk fills it at 1x and fits at 3x.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from levelfield.agents.population import load_population
from levelfield.agents.replay import load_trajectory
from levelfield.analysis import summarize
from levelfield.analysis.table import load_run
from levelfield.config import RunConfig
from levelfield.executor import run
from levelfield.policy import resolve_policy
from levelfield.records import Outcome, Reason, TrialRecord
from levelfield.store import reading
from levelfield.tasks import load_dataset

from ..conftest import EXAMPLES

SUITE = EXAMPLES / "noise-suite"
CATEGORIES = {"control", "spike", "two-way", "cpu", "pids", "disk"}
HEADROOM = resolve_policy("3x").name  # a bare multiplier is stored under its preset's name


def _records(out: Path, **options: object) -> dict[tuple[str, str, str], TrialRecord]:
    run(RunConfig(dataset=SUITE, out=out, concurrency=2, **options))  # type: ignore[arg-type]
    with reading(out) as store:
        return {(r.task, r.agent, r.policy): r for r in store.records()}


def test_every_task_loads_with_a_category_trajectories_and_a_population() -> None:
    dataset = load_dataset(SUITE)
    assert not dataset.problems
    assert len(dataset.tasks) >= 12
    for task in dataset.tasks:
        assert task.metadata.get("category") in CATEGORIES, task.name
        assert task.metadata.get("description"), task.name
        assert task.has_solution, task.name
        for name in ("lean", "hungry", "adaptive"):
            assert load_trajectory(task.path / "trajectories" / f"{name}.json").steps, task.name
        toml = tomllib.loads((task.path / "task.toml").read_text())
        assert {"cpus", "memory_mb", "storage_mb"} <= set(toml["environment"]), task.name
        population = load_population(task.path / "trajectories" / "population.toml")
        assert population.description, task.name
        for name in population.probabilities:
            assert load_trajectory(task.path / "trajectories" / f"{name}.json").steps, task.name


@pytest.mark.cgroup2
@pytest.mark.sandbox
def test_a_control_task_passes_at_1x_with_the_oracle(tmp_path: Path) -> None:
    records = _records(tmp_path / "run", task_names=["csv-totals"], policies=["strict"])
    record = records[("csv-totals", "oracle", "strict")]
    assert (record.outcome, record.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    assert record.evidence.oom_kills == 0


@pytest.mark.cgroup2
@pytest.mark.sandbox
def test_a_hungry_trajectory_killed_at_3x_passes_uncapped_and_books_as_unlock(
    tmp_path: Path,
) -> None:
    records = _records(
        tmp_path / "run",
        task_names=["top-words"],
        agents=["replay:hungry"],
        policies=["strict", "3x", "uncapped"],
    )
    capped = records[("top-words", "replay:hungry", HEADROOM)]
    assert (capped.outcome, capped.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
    assert capped.evidence.oom_kills >= 1
    free = records[("top-words", "replay:hungry", "uncapped")]
    assert (free.outcome, free.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)
    spec_bytes = free.limits["memory_spec_bytes"]
    assert free.evidence.memory_peak_bytes is not None
    assert free.evidence.memory_peak_bytes > 3 * spec_bytes  # what made 3x too little

    # killed at 1x and 3x, above 3x uncapped: the decomposition books the rise as the strategy's
    summary = summarize(load_run(tmp_path / "run").trials, n_resamples=200)
    step = next(d for d in summary.decompositions if d.after == "uncapped")
    assert (step.before, step.strategy_kills, step.strategy_tasks) == (HEADROOM, 1, ("top-words",))
    assert step.delta_score == pytest.approx(1.0)
    assert (step.noise_removal, step.capability_unlock) == pytest.approx((0.0, 1.0))


@pytest.mark.cgroup2
@pytest.mark.sandbox
def test_the_disk_task_fills_its_disk_at_1x_and_fits_at_3x(tmp_path: Path) -> None:
    records = _records(tmp_path / "run", task_names=["bundle-assets"], policies=["strict", "3x"])
    full = records[("bundle-assets", "oracle", "strict")]
    assert (full.outcome, full.reason) == (Outcome.INFRA_ERROR, Reason.STORAGE_EXHAUSTED)
    assert full.evidence.storage_full
    roomy = records[("bundle-assets", "oracle", HEADROOM)]
    assert (roomy.outcome, roomy.reason) == (Outcome.PASSED, Reason.TESTS_PASSED)


@pytest.mark.sandbox
def test_a_hungry_but_wrong_path_is_killed_at_1x_and_fails_on_its_own_at_3x(
    tmp_path: Path,
) -> None:
    records = _records(
        tmp_path / "run",
        task_names=["json-merge"],
        agents=["replay:hungry-wrong"],
        policies=["strict", "3x"],
    )
    killed = records[("json-merge", "replay:hungry-wrong", "strict")]
    assert (killed.outcome, killed.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
    survived = records[("json-merge", "replay:hungry-wrong", HEADROOM)]
    assert (survived.outcome, survived.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    assert survived.evidence.oom_kills == 0
    peak, spec = survived.evidence.memory_peak_bytes, survived.limits["memory_spec_bytes"]
    assert peak is not None and 1.5 * spec < peak < 2.5 * spec
