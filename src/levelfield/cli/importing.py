"""`levelfield import`: other harnesses' results brought in as runs, to analyse them here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from levelfield.cli._console import console, err


def harbor(
    job_dir: Annotated[
        Path, typer.Argument(help="A Harbor job directory (result.json per trial).")
    ],
    out: Annotated[Path, typer.Option(help="Run directory to create or add to.")],
) -> None:
    """Import a Harbor job's trials as a run, mapping Harbor's exception types to reasons."""
    from levelfield.harbor.importing import import_harbor_job

    result = import_harbor_job(job_dir, out)
    for problem in result.skipped:
        err.print(f"[yellow]skipped[/] {problem}")
    console.print(
        f"imported {result.imported} trials ({result.already_stored} already there) "
        f"into {result.run_dir}; see `levelfield report {result.run_dir}`"
    )


def register(app: typer.Typer) -> None:
    """Add the `import` group."""
    import_app = typer.Typer(no_args_is_help=True, help="Bring other harnesses' results in.")
    import_app.command("harbor")(harbor)
    app.add_typer(import_app, name="import")
