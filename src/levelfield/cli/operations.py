"""The operations commands: `doctor` (what this host can enforce, tried for real) and `reap`
(what a killed run left behind)."""

from __future__ import annotations

from typing import Annotated

import typer

from levelfield.cli._console import console
from levelfield.cli._options import RunDir


def doctor() -> None:
    """What this host can enforce: cgroups and controllers, bubblewrap, loop disks, engines."""
    from levelfield.doctor import run_checks
    from levelfield.report.checks import show_doctor

    checks = run_checks()
    show_doctor(console, checks)
    raise typer.Exit(0 if all(c.ok for c in checks if c.needed_by == "process") else 1)


def reap(
    run_dir: RunDir,
    backend: Annotated[str | None, typer.Option(help="Default: the run's own.")] = None,
) -> None:
    """Remove processes, cgroups and disks a killed run left (a resumed run does this itself)."""
    from levelfield.sandbox import BackendOptions, get_backend
    from levelfield.store import reading

    with reading(run_dir) as store:
        run_id = store.meta()["run_id"]
        backend = backend or store.meta().get("backend") or "process"
    count = get_backend(backend, BackendOptions(run_id, run_dir.resolve())).reap(run_id)
    console.print(f"reaped {count} leftovers of run {run_id}")


def register(app: typer.Typer) -> None:
    """Add `doctor` and `reap`."""
    app.command()(doctor)
    app.command()(reap)
