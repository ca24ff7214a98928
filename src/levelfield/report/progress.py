"""Live progress for a run: a bar with counts of passed, failed and infra errors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from levelfield.plan import Trial, estimate_duration_s
from levelfield.records import Outcome, TrialRecord


class TrialProgress:
    """Use as a context manager; hand `plan` and `advance` to `levelfield.run`."""

    def __init__(self, console: Console | None = None, *, concurrency: int = 1) -> None:
        self.console = console or Console(stderr=True)
        self.concurrency = concurrency
        self.counts: Counter[str] = Counter()
        self._progress = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._bar: Any = None

    def __enter__(self) -> TrialProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.__exit__(*exc)  # type: ignore[arg-type]

    def plan(self, todo: Sequence[Trial], already_stored: int) -> None:
        minutes = estimate_duration_s(todo, self.concurrency) / 60
        self.console.print(
            f"{len(todo)} trials to run ({already_stored} already stored), "
            f"concurrency {self.concurrency}, at most ~{minutes:.0f} min by the tasks' timeouts"
        )
        self._bar = self._progress.add_task("trials", total=len(todo), counts=self._text())

    def advance(self, record: TrialRecord) -> None:
        self.counts[record.outcome.value] += 1
        if self._bar is not None:
            self._progress.update(self._bar, advance=1, counts=self._text())

    def _text(self) -> str:
        c = self.counts
        return (
            f"[green]{c[Outcome.PASSED]} passed[/] [red]{c[Outcome.FAILED]} failed[/] "
            f"[yellow]{c[Outcome.INFRA_ERROR]} infra errors[/]"
        )
