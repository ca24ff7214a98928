"""Rendering of `tasks check` and `doctor`."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from levelfield.checks import DatasetCheck
from levelfield.doctor import Check


def show_task_checks(console: Console, report: DatasetCheck) -> None:
    table = Table(title=f"tasks in {report.path}", header_style="bold")
    for name in ("task", "status", "backend (auto)", "details"):
        table.add_column(name)
    for task in report.tasks:
        status = (
            "[red]problem[/]"
            if task.problems
            else ("[yellow]warning[/]" if task.warnings else "[green]ok[/]")
        )
        details = "\n".join(
            [
                *(f"[red]✗[/] {p}" for p in task.problems),
                *(f"[yellow]![/] {w}" for w in task.warnings),
            ]
        )
        table.add_row(task.name, status, f"{task.backend}: {task.why}", details)
    console.print(table)
    bad = sum(1 for t in report.tasks if t.problems)
    console.print(f"{len(report.tasks)} tasks, {bad} with problems")


def show_doctor(console: Console, checks: Sequence[Check]) -> None:
    table = Table(title="what this host can enforce", header_style="bold")
    for name in ("check", "", "detail", "needed by"):
        table.add_column(name)
    for check in checks:
        mark = "[green]✓[/]" if check.ok else "[red]✗[/]"
        table.add_row(check.name, mark, check.detail, f"{check.needed_by} backend")
    console.print(table)
