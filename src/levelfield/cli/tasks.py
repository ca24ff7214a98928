"""`levelfield tasks`: inspect and validate task directories before a run meets them."""

from __future__ import annotations

from typing import Annotated

import typer

from levelfield.cli._console import console
from levelfield.cli._options import Dataset


def check(
    dataset: Dataset,
    with_nop: Annotated[
        bool, typer.Option(help="Also run the nop agent: a task it passes is broken.")
    ] = False,
    backend: Annotated[str, typer.Option(help="Backend for --with-nop.")] = "auto",
) -> None:
    """Validate every task; list problems and warnings, and the backend each task will get
    under --backend auto, and why; exit 1 if any task has a problem."""
    from levelfield.checks import check_dataset
    from levelfield.report.checks import show_task_checks

    report = check_dataset(dataset, with_nop=with_nop, backend=backend)
    show_task_checks(console, report)
    raise typer.Exit(1 if report.has_problems else 0)


def register(app: typer.Typer) -> None:
    """Add the `tasks` group."""
    tasks_app = typer.Typer(no_args_is_help=True, help="Inspect and validate task directories.")
    tasks_app.command("check")(check)
    app.add_typer(tasks_app, name="tasks")
