"""Leaderboard → one self-contained HTML page: a forest plot of the scores with their tiers, then
the table and sentences of the Markdown report. Inline CSS and SVG only, as report/html.py.

It is laid out for a 1,600-pixel window: the table's entry column wraps (submission names run to
90 characters) and each CI may go under its estimate, so that every column, the clean score,
infra errors and provider included, is on screen; in the forest plot a name longer than
LABEL_CHARS is shortened in its middle, so that no name narrows the plot.
tests/integration/test_leaderboard_real.py measures both in headless Chromium.
"""

from __future__ import annotations

import html

import numpy as np

from levelfield.analysis.estimators import z_value
from levelfield.analysis.standings import Leaderboard
from levelfield.report import _figures
from levelfield.report import _format as f
from levelfield.report.html import markdown_html, page
from levelfield.report.leaderboard import HEADER, details_markdown, rows

_TIER_COLOURS = ("#1565c0", "#ef6c00", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#4e342e")
LABEL_CHARS = 40
CSS = """
body{max-width:1500px}table.board{font-size:12px}table.board td,table.board th{padding:.15rem
.4rem;white-space:normal}table.board td:nth-child(2){text-align:left;overflow-wrap:anywhere;
min-width:8rem;max-width:16rem}table.board th:nth-child(2){text-align:left}table.board .ci{
white-space:nowrap}table.board th{vertical-align:bottom}table:not(.board) td:is(
:first-child,:nth-child(3),:last-child){white-space:normal;text-align:left}table:not(.board)
td:first-child{overflow-wrap:anywhere;max-width:16rem}
"""


def render_leaderboard_html(board: Leaderboard) -> str:
    run = f.info_value(board.info, "run_id")
    caption = (
        f"Thin bars: levelfield's {round(100 * board.level)} % CI, clustered by task. Thick bars: "
        "the leaderboard's ± as a band of the same level (retry noise alone, tasks held fixed). "
        "Colour and the right-hand label: tier; in brackets, the simultaneous rank set. Names "
        f"longer than {LABEL_CHARS} characters are shortened in the middle; the table gives "
        "them whole."
    )
    body = [
        f"<h1>Is #1 really #1? Leaderboard {_e(run)}</h1>",
        f"<figure>{forest_figure(board)}<figcaption>{_e(caption)}</figcaption></figure>",
        board_table(board),
        markdown_html(details_markdown(board)),
    ]
    return page(f"leaderboard {run}", body, CSS)


def board_table(board: Leaderboard) -> str:
    """The main table; an estimate's CI may wrap under it."""
    head = "".join(f"<th>{_e(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in rows(board)
    )
    return f"<table class='board'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(text: str) -> str:
    value, bracket, interval = text.partition(" [")
    if not bracket:
        return _e(text)
    return f"{_e(value)} <span class='ci'>[{_e(interval)}</span>"


def short_label(label: str, chars: int = LABEL_CHARS) -> str:
    """A name cut in its middle, where submission names are least distinct (an agent in front,
    a model at the end)."""
    if len(label) <= chars:
        return label
    head = (chars - 1) // 2
    return f"{label[:head]}…{label[-(chars - 1 - head) :]}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def forest_figure(board: Leaderboard) -> str:
    """Scores best first, CI whiskers, the leaderboard's band, coloured by tier."""
    entries = board.entries
    y = np.arange(len(entries))[::-1]
    z = z_value(board.level)
    out: list[str] = []
    with _figures.svg("fig-forest", out) as fig:
        fig.set_size_inches(9, 1.2 + 0.24 * len(entries))
        ax = fig.subplots()
        for yi, entry in zip(y, entries, strict=True):
            colour = _TIER_COLOURS[(entry.tier - 1) % len(_TIER_COLOURS)]
            lo, hi = (100 * v for v in entry.score.ci)
            mean = 100 * entry.score.mean
            ax.plot([lo, hi], [yi, yi], color=colour, linewidth=1)
            if entry.retry_se == entry.retry_se:  # not NaN
                half = 100 * z * entry.retry_se
                ax.plot([mean - half, mean + half], [yi, yi], color=colour, linewidth=4, alpha=0.5)
            ax.plot([mean], [yi], "o", color=colour, markersize=4)
            low, high = entry.simultaneous
            ax.annotate(
                f"tier {entry.tier} [{low}–{high}]",
                (1.0, yi),
                xycoords=("axes fraction", "data"),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=7,
                color=colour,
            )
        ax.set_yticks(y, [short_label(e.label) for e in entries], fontsize=7)
        ax.set_ylim(-0.8, len(entries) - 0.2)
        ax.set_xlabel("score (points)")
        ax.grid(axis="x", alpha=0.3)
    return out[0]
