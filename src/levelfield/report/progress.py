"""Live progress for a run: a bar with counts of passed, failed and infra errors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from levelfield.executor import PlanInfo
from levelfield.plan import Trial
from levelfield.records import Outcome, Reason, TrialRecord


def plan_table(todo: Sequence[Trial]) -> Table:
    """Trials per agent and policy: the design at a glance before it runs."""
    counts = Counter((t.agent, t.policy.name) for t in todo)
    policies = list(dict.fromkeys(t.policy.name for t in todo))
    table = Table(title="plan", header_style="bold")
    table.add_column("agent")
    for policy in policies:
        table.add_column(policy, justify="right")
    for agent in dict.fromkeys(t.agent for t in todo):
        table.add_row(agent, *(str(counts[(agent, p)]) for p in policies))
    return table


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

    def plan(self, plan: PlanInfo) -> None:
        self.console.print(plan_table(plan.todo))
        self.console.print(
            f"{len(plan.todo)} trials to run ({plan.already_stored} already stored), window "
            f"{plan.window!r}, concurrency {self.concurrency}, order seed {plan.seed}; "
            + (
                f"estimated ~{plan.estimated_s / 60:.1f} min from the stored trials"
                if plan.measured
                else f"at most {plan.estimated_s / 60:.0f} min by the tasks' timeouts"
            )
        )
        self._bar = self._progress.add_task("trials", total=len(plan.todo), counts=self._text())

    def advance(self, record: TrialRecord) -> None:
        self.counts[record.outcome.value] += 1
        if self._bar is None:
            return
        if record.reason is Reason.NODE_LOST:  # its retry is one more record to wait for
            self._progress.update(self._bar, total=self._progress.tasks[0].total + 1)
        self._progress.update(self._bar, advance=1, counts=self._text())

    def _text(self) -> str:
        c = self.counts
        return (
            f"[green]{c[Outcome.PASSED]} passed[/] [red]{c[Outcome.FAILED]} failed[/] "
            f"[yellow]{c[Outcome.INFRA_ERROR]} infra errors[/]"
        )
