"""A leaderboard's #1 line and its tasks → sentences and tables (analysis/board_tasks.py), said
the same way in the terminal, the Markdown and the page."""

from __future__ import annotations

import math

from levelfield.analysis.board_tasks import Deciding
from levelfield.analysis.standings import Leaderboard
from levelfield.report import _format as f

NAMED = 8  # tasks named in a sentence before "and N more"
TASKS_HEADER = ("task", "mean solve rate", "solved by", "#1", "#2", "decides")


def first_sentence(board: Leaderboard) -> str:
    first = board.first
    level = round(100 * board.level)
    verdict = (
        "proven"
        if first.proven
        else f"not proven; a gap of {f.pts(first.gap_needed)} points would be, at this pair's "
        "SE, whatever the rest of the family (z(1 − α/2m)·SE)"
    )
    return (
        f"How sure is #1? {first.label} leads #2, {first.second}, by {f.pts(first.diff)} points "
        f"{f.interval(first.ci, True)} ({level} % CI, paired by task), Holm p "
        f"{_p(first.p_vs_second)} over the {first.family} comparisons: {verdict}."
    )


def task_sentences(board: Leaderboard) -> list[str]:
    nobody = [r.task for r in board.tasks if r.kind == "nobody"]
    everybody = [r.task for r in board.tasks if r.kind == "everybody"]
    lines = [
        f"Per task ({len(board.tasks)} tasks): {len(nobody)} that no entry solved once"
        f"{_named(nobody)}; {len(everybody)} that every entry that ran them solved at least once"
        f"{_named(everybody)}. Neither kind tells two entries apart."
    ]
    lines += [_gap_sentence(gap) for gap in board.deciding]
    return lines


def _gap_sentence(gap: Deciding) -> str:
    shown = ", ".join(f"{t.task} ({f.pts(t.rate_a)} vs {f.pts(t.rate_b)})" for t in gap.tasks)
    return (
        f"The gap {gap.name}, {gap.a} − {gap.b} ({f.pts(gap.diff, True)} points), rests on the "
        f"{gap.n_differ} of {gap.n_tasks} tasks where their solve rates differ"
        + (f"; most: {shown}." if shown else ".")
    )


def task_rows(board: Leaderboard) -> list[tuple[str, ...]]:
    """Every task, hardest first: its mean solve rate over the entries that ran it, how many
    solved it once, #1's and #2's rates, and the top gaps it decides."""
    first, second = board.first.label, board.first.second
    return [
        (
            r.task,
            f.pts(r.mean_rate),
            f"{r.solved_by} of {r.ran_by}",
            _rate(r.solve_rate.get(first)),
            _rate(r.solve_rate.get(second)),
            "; ".join(r.decides),
        )
        for r in board.tasks
    ]


def _rate(value: float | None) -> str:
    return "" if value is None or math.isnan(value) else f.pts(value)


def _named(tasks: list[str]) -> str:
    if not tasks:
        return ""
    more = f" and {len(tasks) - NAMED} more" if len(tasks) > NAMED else ""
    return f" ({', '.join(tasks[:NAMED])}{more})"


def _p(p: float) -> str:
    return f"{p:.3f}" if 0.01 <= p < 0.1 else f.p_value(p)


TASKS_TITLE = "Tasks, hardest first: solve rate in points (passes over trials, as the score)"
