"""Where the commands write, and how they read a stored run: shared by the command groups.

Tables are wide: piped output (CI logs, files) gets room instead of rich's default 80 columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from levelfield.analysis.table import RunData

console = Console(width=None if Console().is_terminal else 200)
err = Console(stderr=True, soft_wrap=True)


def wide_console() -> Console:
    """A console made at call time (a test's captured stdout), as wide as `console`."""
    return Console(width=None if Console().is_terminal else 200)


def load_run_dir(run_dir: Path) -> RunData:
    """A run's tidy trial table; a missing or empty run is the user's error, not a traceback."""
    from levelfield.analysis.table import load_run

    if not run_dir.is_dir():
        raise typer.BadParameter(f"{run_dir} is not a directory", param_hint="RUN_DIR")
    data = load_run(run_dir)
    if data.trials.empty:
        Console(stderr=True).print(f"[red]error:[/] {run_dir} holds no trial yet")
        raise typer.Exit(1)
    return data


@contextmanager
def bad_input() -> Iterator[None]:
    """A trial table that breaks the contract is bad input (exit 2), not a traceback."""
    try:
        yield
    except ValueError as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


def show_adaptive_sections(data: RunData, out: Console) -> None:
    """An adaptive sweep's target and repeats per task, and the cost when trials carry tokens."""
    from levelfield.adaptive import assess_run
    from levelfield.analysis.spend import sweep_cost
    from levelfield.report.adaptive import show_adaptive

    show_adaptive(assess_run(data.trials, data.info), sweep_cost(data.trials), out)
