"""The `levelfield` command assembled: one Typer app, each command group adding its commands.

A `LevelfieldError` is caught once, here: its message and an exit code (2 for bad input, 1
otherwise), never a traceback. Any other exception is a bug and shows its traceback, but never its
frames' local variables: Typer's pretty tracebacks print them by default, and a local may hold an
API key (the options, the environment).
"""

from __future__ import annotations

import sys

import typer

from levelfield.cli import analysis, images, importing, operations, running, scripted_model, tasks
from levelfield.cli._console import err
from levelfield.errors import InputError, LevelfieldError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    help="Run agentic benchmarks under an explicit resource floor and ceiling, "
    "with kernel-evidenced outcomes and honest error bars.",
)
for group in (running, analysis, tasks, operations, importing, images, scripted_model):
    group.register(app)


def main() -> None:
    """Entry point: a LevelfieldError is a message and an exit code, not a traceback."""
    try:
        app()
    except InputError as exc:
        err.print(f"[red]error:[/] {exc}")
        sys.exit(2)
    except LevelfieldError as exc:
        err.print(f"[red]error:[/] {exc}")
        sys.exit(1)
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted[/]: finished trials are stored; run the same command to resume"
        )
        sys.exit(130)
