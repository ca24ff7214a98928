"""Adaptive sweeps: a pilot, then rounds that give more repeats where the target's CI needs them.

Order: run the pilot (K0 repeats of every task × configuration: today's sweep with K0 repeats,
in the same seeded interleaved order); then, round after round, measure the target (a
configuration's score, or the paired difference of two), stop when its CI half-width is at or
below the target or the budget is spent, and otherwise give the next round's trials to the cells
where they cut the CI most (analysis/allocation.py). Each round's trials are shuffled together
with a seed derived from the sweep's seed and the round's number.

Every round is written to the run's meta before its first trial starts: a killed sweep, run
again, first finishes the rounds it stored (the executor skips what is committed), then goes on,
so the allocation a round made is never recomputed from a different set of trials.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from levelfield.analysis import allocation
from levelfield.analysis.table import load_run
from levelfield.config import RunConfig
from levelfield.errors import InputError
from levelfield.executor import PlanInfo, run
from levelfield.executor.local import OnTrial
from levelfield.harbor.task_features import without_refused
from levelfield.plan import Trial, trial_key
from levelfield.policy import Policy
from levelfield.store import Store
from levelfield.tasks import Task, load_dataset

META_KEY = "adaptive"
MAX_ROUNDS = 50  # a round adds ≥ 10 % of the trials so far: 50 rounds is over 100x the pilot


class AdaptiveConfig(BaseModel):
    """What `--target-ci`, `--target`, `--max-trials` and `--pilot-repeats` set."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    half_width: float = Field(gt=0, lt=1, description="Target CI half-width, as a proportion.")
    target: str = Field("score", description="score, or diff:A-B (A − B, paired by task).")
    max_trials: int | None = Field(
        None, ge=1, description="Budget of trials, the pilot included; default 10x the pilot."
    )
    pilot_repeats: int = Field(2, ge=2, description="Repeats per cell before any allocation.")
    level: float = Field(0.95, gt=0, lt=1)


@dataclass(frozen=True)
class Cell:
    agent: str
    policy: str

    @property
    def label(self) -> str:
        return f"{self.agent}/{self.policy}"


@dataclass(frozen=True)
class TargetReading:
    """One target group (a configuration's score, or the difference) as measured now."""

    name: str
    estimate: float
    half_width: float
    between_half_width: float
    needed: float
    tasks_needed: float
    next_point_trials: float  # more trials to narrow the CI by one more point


@dataclass
class AdaptiveResult:
    reason: str  # "target reached", "budget spent", "round limit"
    readings: list[TargetReading]
    trials: int
    max_trials: int
    rounds: int
    repeats: dict[str, dict[str, int]] = field(default_factory=dict)  # config label → task → K


OnRound = Callable[[int, int, list[TargetReading]], None]


def run_adaptive(
    config: RunConfig,
    adaptive: AdaptiveConfig,
    *,
    on_plan: Callable[[PlanInfo], None] | None = None,
    on_trial: OnTrial | None = None,
    on_round: OnRound | None = None,
) -> AdaptiveResult:
    """Run (or resume) an adaptive sweep; returns why it stopped and what it measured."""
    tasks, cells, policies = _design(config)
    groups = target_groups(adaptive.target, cells)
    pilot = config.model_copy(update={"repeats": adaptive.pilot_repeats})
    budget = adaptive.max_trials or 10 * adaptive.pilot_repeats * len(tasks) * len(cells)
    if budget < adaptive.pilot_repeats * len(tasks) * len(cells):
        raise InputError(f"--max-trials {budget} does not cover the pilot")
    run(pilot, on_plan=on_plan, on_trial=on_trial)
    stored = _stored_rounds(config, adaptive)
    for number, cells_of_round in enumerate(stored, start=1):
        trials = _round_trials(cells_of_round, tasks, policies, config, number)
        run(config, on_plan=on_plan, on_trial=on_trial, trials=trials)
    number = len(stored)
    while True:
        k, passes, total = _counts(config, tasks, cells)
        readings, needed, weights = _measure(k, passes, groups, adaptive)
        if on_round:
            on_round(number, total, readings)
        reason = _stop_reason(readings, adaptive, total, budget, number)
        if reason:
            repeats = _repeats(k, tasks, cells)
            return AdaptiveResult(reason, readings, total, budget, number, repeats)
        number += 1
        size = int(allocation.round_size(np.int64(total), needed, np.int64(budget - total)))
        add = allocation.allocate(k, weights, np.int64(size))
        plan = _round_plan(k, add, tasks, cells)
        _store_round(config, plan)
        trials = _round_trials(plan, tasks, policies, config, number)
        run(config, on_plan=on_plan, on_trial=on_trial, trials=trials)


def target_groups(target: str, cells: list[Cell]) -> list[tuple[str, np.ndarray]]:
    """(name, coefficients over cells) per quantity that must reach the target: every
    configuration's score, or the one paired difference A − B."""
    if target == "score":
        return [(c.label, np.eye(len(cells))[i]) for i, c in enumerate(cells)]
    kind, _, pair = target.partition(":")
    a, sep, b = pair.partition("-")
    if kind != "diff" or not sep:
        raise InputError(f"--target {target!r}: expected score or diff:A-B")
    coef = np.zeros(len(cells))
    coef[_cell_index(a, cells)] += 1.0
    coef[_cell_index(b, cells)] -= 1.0
    return [(f"{a} − {b}", coef)]


def _cell_index(name: str, cells: list[Cell]) -> int:
    """A configuration by its policy (one agent), its agent (one policy) or AGENT/POLICY."""
    from levelfield.policy import resolve_policy

    policy = name
    with contextlib.suppress(Exception):  # not a policy: an agent or a label
        policy = resolve_policy(name).name
    hits = [i for i, c in enumerate(cells) if name in (c.label, c.agent) or c.policy == policy]
    if len(hits) != 1:
        labels = ", ".join(c.label for c in cells)
        raise InputError(f"--target: {name!r} names {len(hits)} configurations of {labels}")
    return hits[0]


def _design(config: RunConfig) -> tuple[list[Task], list[Cell], dict[str, Policy]]:
    dataset = without_refused(load_dataset(config.dataset), config.backend)
    tasks = [t for t in dataset.tasks if not config.task_names or t.name in config.task_names]
    if not tasks:
        raise InputError(f"{config.dataset}: no valid task")
    policies = {p.name: p for p in config.resolved_policies()}
    cells = [Cell(a, p) for a in config.resolved_agents() for p in policies]
    return sorted(tasks, key=lambda t: t.name), cells, policies


def _counts(
    config: RunConfig, tasks: list[Task], cells: list[Cell]
) -> tuple[np.ndarray, np.ndarray, int]:
    frame = load_run(config.out.resolve()).trials
    k, passes = counts_of(frame[frame["window"] == config.window], [t.name for t in tasks], cells)
    return k, passes, int(k.sum())


def counts_of(
    frame: pd.DataFrame, tasks: list[str], cells: list[Cell]
) -> tuple[np.ndarray, np.ndarray]:
    """Per cell (configuration × task): trials and passes (infra errors count as failures, as
    in the score)."""
    index = {(c.agent, c.policy): i for i, c in enumerate(cells)}
    column = {t: j for j, t in enumerate(tasks)}
    k = np.zeros((len(cells), len(tasks)), np.int64)
    passes = np.zeros_like(k)
    rows = frame[["agent", "policy", "task", "status"]].astype(str).itertuples(index=False)
    for agent, policy, task, status in rows:
        i, j = index.get((agent, policy)), column.get(task)
        if i is not None and j is not None:
            k[i, j] += 1
            passes[i, j] += status == "passed"
    return k, passes


@dataclass(frozen=True)
class Assessment:
    """An adaptive run as its report shows it: settings, target readings, K per task."""

    settings: AdaptiveConfig
    readings: list[TargetReading]
    repeats: dict[str, dict[str, int]]
    rounds: int
    n_trials: int


def assess_run(trials: pd.DataFrame, info: dict[str, Any]) -> Assessment | None:
    """Measure a stored adaptive sweep's target again (None for a sweep that was not adaptive)."""
    state = info.get(META_KEY) or {}
    if "settings" not in state:
        return None
    settings = AdaptiveConfig.model_validate(state["settings"])
    windows = state.get("rounds", {})
    window = next(iter(windows), "default")
    frame = trials[trials["window"].fillna("default") == window]
    tasks = sorted(str(t) for t in frame["task"].unique())
    cells = [
        Cell(str(a), str(p))
        for a in sorted(frame["agent"].unique())
        for p in sorted(frame["policy"].unique())
    ]
    k, passes = counts_of(frame, tasks, cells)
    readings, _, _ = _measure(k, passes, target_groups(settings.target, cells), settings)
    repeats = {c.label: {t: int(k[i, j]) for j, t in enumerate(tasks)} for i, c in enumerate(cells)}
    return Assessment(settings, readings, repeats, len(windows.get(window, [])), int(k.sum()))


def _measure(
    k: np.ndarray,
    passes: np.ndarray,
    groups: list[tuple[str, np.ndarray]],
    adaptive: AdaptiveConfig,
) -> tuple[list[TargetReading], np.ndarray, np.ndarray]:
    """Readings per group; the trials still needed (summed over groups short of the target) and
    the allocation weights (each short group's, added)."""
    readings, needed, weights = [], 0.0, np.zeros(k.shape)
    for name, coef in groups:
        a = allocation.weights(k, passes, coef)
        state = allocation.target_state(k, a, coef, passes, adaptive.half_width, adaptive.level)
        between = float(np.sqrt(state.between) * allocation.z_value(adaptive.level))
        narrower = max(float(state.half_width) - 0.01, 1e-6)
        next_point = allocation.target_state(k, a, coef, passes, narrower, adaptive.level)
        readings.append(
            TargetReading(
                name,
                float(state.estimate),
                float(state.half_width),
                between,
                float(state.needed),
                float(state.tasks_needed),
                float(next_point.needed),
            )
        )
        if float(state.half_width) > adaptive.half_width:
            needed += float(state.needed)
            weights += a
    return readings, np.float64(needed), weights


def _stop_reason(
    readings: list[TargetReading], adaptive: AdaptiveConfig, total: int, budget: int, rounds: int
) -> str | None:
    if all(r.half_width <= adaptive.half_width for r in readings):
        return "target reached"
    if total >= budget:
        return "budget spent"
    if rounds >= MAX_ROUNDS:
        return "round limit"
    return None


RoundPlan = list[tuple[str, str, str, int, int]]  # agent, policy, task, first repeat, last


def _round_plan(k: np.ndarray, add: np.ndarray, tasks: list[Task], cells: list[Cell]) -> RoundPlan:
    return [
        (c.agent, c.policy, t.name, int(k[i, j]) + 1, int(k[i, j] + add[i, j]))
        for i, c in enumerate(cells)
        for j, t in enumerate(tasks)
        if add[i, j] > 0
    ]


def _round_trials(
    plan: RoundPlan,
    tasks: list[Task],
    policies: dict[str, Policy],
    config: RunConfig,
    number: int,
) -> list[Trial]:
    """The round's trials in the seeded interleaved order (as plan.plan_trials orders a sweep)."""
    by_name = {t.name: t for t in tasks}
    trials = [
        Trial(
            trial_key(task, agent, policy, r, config.window),
            by_name[task],
            agent,
            policies[policy],
            r,
            config.window,
        )
        for agent, policy, task, first, last in plan
        for r in range(first, last + 1)
        if task in by_name and policy in policies
    ]
    trials.sort(key=lambda t: t.key)
    random.Random(f"{config.seed}/round-{number}").shuffle(trials)
    return trials


def _stored_rounds(config: RunConfig, adaptive: AdaptiveConfig) -> list[RoundPlan]:
    """The rounds a previous invocation stored for this window; records the settings."""
    with Store.open_for_writing(config.out.resolve()) as store:
        state = store.meta().get(META_KEY, {})
        state["settings"] = adaptive.model_dump()
        store.set_meta({META_KEY: state})
    rounds = state.get("rounds", {}).get(config.window, [])
    return [[tuple(cell) for cell in r["cells"]] for r in rounds]  # type: ignore[misc]


def _store_round(config: RunConfig, plan: RoundPlan) -> None:
    with Store.open_for_writing(config.out.resolve()) as store:
        state: dict[str, Any] = store.meta().get(META_KEY, {})
        rounds = state.setdefault("rounds", {}).setdefault(config.window, [])
        rounds.append(
            {"created_at": datetime.now(UTC).isoformat(timespec="seconds"), "cells": plan}
        )
        store.set_meta({META_KEY: state})


def _repeats(k: np.ndarray, tasks: list[Task], cells: list[Cell]) -> dict[str, dict[str, int]]:
    return {
        c.label: {t.name: int(k[i, j]) for j, t in enumerate(tasks)} for i, c in enumerate(cells)
    }
