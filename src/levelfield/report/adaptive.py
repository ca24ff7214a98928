"""An adaptive sweep's figures → terminal text: each round's reading, why it stopped and what
reaching the target would take, the repeats each task got, and what the sweep cost."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from levelfield.adaptive import AdaptiveResult, Assessment, TargetReading
    from levelfield.analysis.spend import SweepCost


def _pp(x: float) -> str:
    return f"{100 * x:.1f}"


def describe_round(number: int, total: int, readings: list[TargetReading], target: float) -> str:
    what = "; ".join(f"{r.name} {_pp(r.estimate)} ±{_pp(r.half_width)}" for r in readings)
    name = "pilot" if number == 0 else f"round {number}"
    return f"[bold]{name}[/] done, {total} trials: {what} (target ±{_pp(target)} points)"


def what_it_takes(reading: TargetReading, target: float) -> str:
    if reading.half_width <= target:
        return "reached"
    if math.isinf(reading.needed):
        return (
            f"repeats cannot: the between-task part alone is ±{_pp(reading.between_half_width)}; "
            f"about {reading.tasks_needed:.0f} tasks would be needed"
        )
    return f"about {math.ceil(reading.needed)} more trials"


def show_stop(result: AdaptiveResult, target: float, console: Console) -> None:
    console.print(
        f"[bold]adaptive sweep stopped: {result.reason}[/] after {result.rounds} round(s) and "
        f"{result.trials} of at most {result.max_trials} trials"
    )
    for r in result.readings:
        console.print(
            f"  {r.name}: {_pp(r.estimate)} ±{_pp(r.half_width)} points (target ±{_pp(target)}); "
            f"{what_it_takes(r, target)}"
        )


def show_adaptive(assessment: Assessment | None, cost: SweepCost | None, console: Console) -> None:
    """The report's adaptive and cost sections (each only when it applies)."""
    if assessment is not None:
        _show_assessment(assessment, console)
    if cost is not None:
        console.print(cost_table(cost, assessment))


def _show_assessment(a: Assessment, console: Console) -> None:
    target = a.settings.half_width
    console.print(
        f"[bold]adaptive sweep[/]: target {a.settings.target} ±{_pp(target)} points, pilot "
        f"{a.settings.pilot_repeats} repeats, {a.rounds} round(s), {a.n_trials} trials"
    )
    for r in a.readings:
        console.print(
            f"  {r.name}: {_pp(r.estimate)} ±{_pp(r.half_width)}; {what_it_takes(r, target)}"
        )
    table = Table(title="repeats K per task (adaptive allocation)")
    table.add_column("task")
    labels = list(a.repeats)
    for label in labels:
        table.add_column(label, justify="right")
    tasks = sorted(next(iter(a.repeats.values()), {}))
    for task in tasks:
        table.add_row(task, *(str(a.repeats[label][task]) for label in labels))
    console.print(table)


def cost_table(cost: SweepCost, assessment: Assessment | None = None) -> Table:
    table = Table(title="cost (tokens × --prices)")
    for name in ("configuration", "trials", "tokens in", "tokens out", "cost", "per trial"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for c in cost.configs:
        table.add_row(
            " / ".join(c.labels.values()),
            str(c.n_trials),
            f"{c.tokens_in:,}",
            f"{c.tokens_out:,}",
            _usd(c.cost_usd),
            _usd(c.cost_per_trial_usd),
        )
    table.add_row(
        "[bold]whole sweep[/]",
        str(cost.n_trials),
        f"{cost.tokens_in:,}",
        f"{cost.tokens_out:,}",
        _usd(cost.total_usd),
        _usd(cost.total_usd / cost.n_trials if cost.n_trials else math.nan),
    )
    if assessment is not None:
        per_trial = cost.total_usd / cost.n_trials if cost.n_trials else math.nan
        for r in assessment.readings:
            table.caption = (table.caption or "") + (
                f"{r.name}: ±{_pp(r.half_width)} points for {_usd(cost.total_usd)} in all, "
                f"{_usd(cost.total_usd / (100 * r.half_width))} per point of half-width; "
                + _next_point(r.next_point_trials, per_trial)
            )
    return table


def _next_point(trials: float, per_trial: float) -> str:
    """What narrowing the CI by one more point would cost at the sweep's cost per trial."""
    if math.isinf(trials):
        return "one point narrower is beyond repeats (the between-task part). "
    return f"one point narrower: ~{math.ceil(trials)} more trials, {_usd(trials * per_trial)}. "


def _usd(x: float) -> str:
    if math.isnan(x):
        return "unpriced"
    if math.isinf(x):
        return "∞"
    return f"${x:.4f}" if x < 1 else f"${x:,.2f}"
