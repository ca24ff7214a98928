"""`levelfield sweep --target-ci`: the adaptive sweep's options, its run and its report.

Kept apart from cli.py (which only adds the options to `sweep` and hands over here)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from levelfield.config import RunConfig

TargetCi = Annotated[
    str | None,
    typer.Option(
        help="Adaptive sweep: stop when the target's 95 % CI half-width is at most this "
        "(2pp = ±2 points). A pilot of --pilot-repeats per task, then rounds that give more "
        "repeats to the tasks whose variance the CI needs cut."
    ),
]
Target = Annotated[
    str,
    typer.Option(
        help="What --target-ci is about: score (every configuration's) or diff:A-B, the paired "
        "difference A − B (policies, agents, or AGENT/POLICY)."
    ),
]
MaxTrials = Annotated[
    int | None,
    typer.Option(min=1, help="Adaptive budget, pilot included (default: 10x the pilot)."),
]
PilotRepeats = Annotated[int, typer.Option(min=2, help="Adaptive: repeats of the pilot.")]
Prices = Annotated[
    Path | None,
    typer.Option(
        help="Price table (TOML: [models.NAME] input/output = $ per million tokens) that puts a "
        "cost on each trial; default: the one shipped with levelfield."
    ),
]


def execute_adaptive(
    cfg: RunConfig,
    target_ci: str,
    target: str,
    max_trials: int | None,
    pilot_repeats: int,
    err: Console,
) -> None:
    """Run (or resume) the adaptive sweep with progress, then say why it stopped."""
    from levelfield._cli_analysis import parse_points
    from levelfield.adaptive import AdaptiveConfig, run_adaptive
    from levelfield.errors import InputError
    from levelfield.report.adaptive import describe_round, show_stop
    from levelfield.report.progress import TrialProgress

    try:
        adaptive = AdaptiveConfig(
            half_width=parse_points(target_ci),
            target=target,
            max_trials=max_trials,
            pilot_repeats=pilot_repeats,
        )
    except ValueError as exc:
        raise InputError(f"--target-ci/--max-trials: {exc}") from exc
    try:
        with TrialProgress(err, concurrency=cfg.concurrency) as progress:
            result = run_adaptive(
                cfg,
                adaptive,
                on_plan=progress.plan,
                on_trial=progress.advance,
                on_round=lambda n, total, readings: err.print(
                    describe_round(n, total, readings, adaptive.half_width)
                ),
            )
    except KeyboardInterrupt:
        err.print(
            f"[yellow]interrupted[/]: finished trials and the rounds' plan are stored in "
            f"{cfg.out}; run the same command to resume the same allocation"
        )
        raise typer.Exit(130) from None
    show_stop(result, adaptive.half_width, err)
