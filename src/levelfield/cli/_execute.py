"""Running a configuration from the command line: progress while it runs, and an interrupt
(Ctrl-C or SIGTERM) that leaves a resumable run and says so. `run`, `sweep` and each window of a
`campaign` go through here."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, NoReturn

import typer

from levelfield.cli._console import err
from levelfield.cli._options import parse_points

if TYPE_CHECKING:  # the commands that run nothing start without the configuration's models
    from levelfield.config import RunConfig


def execute(cfg: RunConfig) -> None:
    """Run (or resume) every planned trial with a progress bar, then say where they are."""
    from levelfield.executor import run as run_trials
    from levelfield.report.progress import TrialProgress
    from levelfield.store import reading

    stop_on_sigterm()
    try:
        with TrialProgress(err, concurrency=cfg.concurrency) as progress:
            result = run_trials(cfg, on_plan=progress.plan, on_trial=progress.advance)
    except KeyboardInterrupt:
        err.print(
            f"[yellow]interrupted[/]: finished trials are stored in {cfg.out}; "
            "run the same command to resume"
        )
        raise typer.Exit(130) from None
    for problem in result.task_problems:
        err.print(f"[yellow]skipped task[/] {problem.message}")
    with reading(result.run_dir) as store:
        err.print(
            f"{result.executed} trials run, {store.count()} stored in {result.run_dir}; "
            f"see `levelfield results {result.run_dir}`"
        )


def execute_adaptive(
    cfg: RunConfig, target_ci: str, target: str, max_trials: int | None, pilot_repeats: int
) -> None:
    """Run (or resume) the adaptive sweep with progress, then say why it stopped."""
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


def stop_on_sigterm() -> None:
    """A SIGTERM (a timer's stop, `kill`) unwinds like Ctrl-C: in-flight trials are discarded
    and rerun on resume, finished ones stay stored."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt
