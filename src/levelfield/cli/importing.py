"""`levelfield import`: other harnesses' results brought in as runs, to analyse them here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol

import typer
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from levelfield.cli._console import console, err
from levelfield.errors import InputError

if TYPE_CHECKING:
    from levelfield.harbor.importing import ImportResult


def harbor(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Harbor folders: a job (one result.json per trial), a submission (a folder of "
            "jobs) or a leaderboard (a folder of submissions). Several may be given."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Run directory to create or add to.")],
    label: Annotated[
        str | None,
        typer.Option(
            help="Name the trials of a single job or submission PATH by this label (a "
            "submission is otherwise named by its folder, a job by Harbor's agent and model)."
        ),
    ] = None,
) -> None:
    """Import Harbor trials as a run: each submission becomes a configuration (its `agent`),
    with reasons from Harbor's exceptions and rewards, and flags on what looks wrong."""
    from levelfield.harbor.importing import import_harbor

    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err
    ) as progress:
        bar = progress.add_task("reading trial folders", total=None)
        result = import_harbor(
            paths,
            out,
            label=label,
            on_progress=lambda n: progress.update(bar, description=f"read {n} trial folders"),
        )
        if result.imported:
            progress.update(bar, description="preparing the analysis table")
            _prepare_table(out, result.documents)
    _show(result)


def inspect(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Inspect logs (.eval files), or folders holding them."),
    ],
    out: Annotated[Path, typer.Option(help="Run directory to create or add to.")],
    label: Annotated[
        str | None,
        typer.Option(help="Name the trials by this label (else by the eval's model)."),
    ] = None,
) -> None:
    """Import Inspect samples as a run: each sample and epoch a trial, its verdict from the
    levelfield record beside the log (policy, limits, kernel evidence) when it ran in
    levelfield's sandbox, else from its score and error."""
    try:
        from levelfield.inspect.importing import import_inspect
    except ImportError as exc:
        raise InputError(f"reading Inspect logs needs Inspect ({exc}): "
                         "pip install 'levelfield[inspect]'") from exc  # fmt: skip
    result = import_inspect(paths, out, label=label)
    _finish(result, out, of=", ".join(sorted(result.labels)))


def tb1(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Terminal-Bench 1.x folders: runs, submissions or the whole board."),
    ],
    out: Annotated[Path, typer.Option(help="Run directory to create or add to.")],
    label: Annotated[str | None, typer.Option(help="Name the trials of one submission.")] = None,
) -> None:
    """Import Terminal-Bench 1.x runs (results.json, <run>_results.json) as a run: each
    submission a configuration, each trial's reason from its is_resolved and failure_mode."""
    from levelfield.tb1 import import_tb1

    result = import_tb1(paths, out, label=label)
    _finish(result, out, of=f"{len(result.runs)} submissions")


class _Imported(Protocol):
    @property
    def imported(self) -> int: ...
    @property
    def already_stored(self) -> int: ...
    @property
    def skipped(self) -> Sequence[str]: ...
    @property
    def run_dir(self) -> Path: ...


def _finish(result: _Imported, out: Path, *, of: str) -> None:
    """The table prepared, the skipped named, one line of counts: the end of every import
    but Harbor's, which has flags and folders of its own to tell."""
    if result.imported:
        _prepare_table(out)
    for problem in result.skipped:
        err.print(f"[yellow]skipped[/] {problem}")
    console.print(
        f"imported {result.imported} trials ({result.already_stored} already there, "
        f"{len(result.skipped)} skipped) of {of} into {result.run_dir}; "
        f"see `levelfield report {result.run_dir}`"
    )


def _prepare_table(out: Path, documents: Sequence[dict[str, Any]] = ()) -> None:
    """Build the run's tidy table now (analysis/table_cache.py), while the import has the
    user's attention: every `report`, `compare` and `leaderboard` after it then starts from
    the cached table instead of reading tens of thousands of records. An import into a new
    run gives its records, as stored, and they are not read back."""
    from levelfield.analysis.table import prepare

    prepare(out, documents)


def _show(result: ImportResult) -> None:
    for problem in result.skipped:
        err.print(f"[yellow]skipped[/] {problem}")
    for folder in result.folders_skipped:
        err.print(f"[yellow]folder not read[/] {folder}")
    for folder, why in result.submissions_skipped.items():
        err.print(f"[yellow]submission without a trial[/] {folder}: {why}")
    for submission, flags in sorted(result.flags.items()):
        for flag in flags:
            console.print(f"[yellow]flag[/] {submission}: {flag.kind}: {flag.detail}")
    n = len(result.submissions)
    folders = f", {len(result.folders_skipped)} folders not read" if result.folders_skipped else ""
    if result.submissions_skipped:
        folders += (
            f", {len(result.submissions_skipped)} submission folders without a trial "
            f"({', '.join(Path(f).name for f in result.submissions_skipped)})"
        )
    console.print(
        f"{result.found} result.json found: {result.imported} trials imported of {n} "
        f"submission{'s' * (n != 1)}, {result.already_stored} already there, "
        f"{result.job_summaries} job summaries, {len(result.skipped)} skipped{folders} "
        f"({sum(map(len, result.flags.values()))} flags) into {result.run_dir}; "
        f"see `levelfield report {result.run_dir}`"
    )


def register(app: typer.Typer) -> None:
    """Add the `import` group."""
    import_app = typer.Typer(no_args_is_help=True, help="Bring other harnesses' results in.")
    import_app.command("harbor")(harbor)
    import_app.command("inspect")(inspect)
    import_app.command("tb1")(tb1)
    app.add_typer(import_app, name="import")
