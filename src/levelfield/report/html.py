"""Run summary → ONE self-contained HTML file: inline CSS and inline SVG plots, no script, no
link, no font or image fetched at view time, so it can be mailed, archived or opened offline and
still show exactly what the run measured."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from levelfield.analysis.summary import RunSummary
from levelfield.report import _figures, timing
from levelfield.report import _format as f
from levelfield.report.markdown import render_card

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:
1100px;padding:0 1rem;color:#212121}h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;
border-bottom:1px solid #ddd}table{border-collapse:collapse;margin:.5rem 0;font-size:13px}
td,th{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:right;white-space:nowrap}
td:first-child,th:first-child{text-align:left}figure{margin:1rem 0}svg{max-width:100%;
height:auto}figcaption,.note{color:#616161;font-size:12px}.verdict{font-family:ui-monospace,
monospace;font-size:13px}.warn{color:#b26a00}#card td{text-align:left;white-space:normal}
"""


def render_html(summary: RunSummary) -> str:
    """The full page as a string; the caller writes it where the user asked."""
    run = f.info_value(summary.info, "run_id")
    parts = [
        f"<h1>levelfield run {_e(run)}</h1>",
        f"<p class='note'>{round(100 * summary.level)} % CIs clustered by task (Miller 2024); "
        f"bootstrap {summary.n_resamples}× (seed {summary.seed}); points = percent.</p>",
        _section("scores", "Scores", _scores(summary)),
        _section("comparisons", "Paired comparisons", _comparisons(summary)),
        _section(
            "ceiling",
            "Score and infra error rate against the ceiling",
            _figure(
                _figures.ceiling_figure(summary),
                "Bands and bars: task-clustered CI. Dashed: clean score (infra errors left out).",
                missing=f"{len(summary.configs)} configurations: a line each would not be "
                "readable; `levelfield leaderboard RUN --html` draws them as a forest plot.",
            ),
        ),
        _section("decomposition", "Noise removal vs capability unlock", _decomposition(summary)),
        _section("calibration", "Calibration across ceilings", _calibration(summary)),
        _section(
            "sensitivity",
            "Per-task resource sensitivity",
            _figure(
                _figures.heatmap_figure(summary),
                "Per-task score by policy, most sensitive tasks first; ✕ = OOM kills.",
            ),
        ),
        _section(
            "reasons",
            "Outcome reasons per policy",
            _figure(_figures.reasons_figure(summary), "Share of trials by reason."),
        ),
        _section(
            "memory",
            "Peak memory relative to spec",
            _figure(
                _figures.memory_figure(summary),
                "Box p25–p75, whiskers p5–p95, ◆ max; dashed = spec; red = memory ceiling.",
            ),
        ),
        _section("hidden", "Hidden variables", _hidden(summary)),
        _section("time", "By hour of day and by window", _time(summary)),
        _section("card", "Disclosure card", markdown_html(render_card(summary))),
    ]
    return page(f"levelfield run {run}", parts)


def page(title: str, parts: Iterable[str], css: str = "") -> str:
    """A whole page around `parts`: inline style (the page's own `css` after the house's),
    nothing fetched when it is opened."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{_e(title)}</title><style>{CSS}{css}</style></head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _section(anchor: str, title: str, body: str) -> str:
    return f"<section id='{anchor}'><h2>{_e(title)}</h2>\n{body}\n</section>"


def _figure(svg: str | None, caption: str, missing: str = "Not recorded in this run.") -> str:
    if svg is None:
        return f"<p class='note'>{_e(missing)}</p>"
    return f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _scores(summary: RunSummary) -> str:
    rows = [
        (
            f.label(c),
            f.ceiling(c.ceiling),
            str(c.n_tasks),
            str(c.n_trials),
            f.metric(c.score),
            f.interval(c.score.boot_ci),
            f.interval(c.score.wilson_ci),
            f.metric(c.clean_score),
            f.metric(c.infra_error_rate),
        )
        for c in summary.configs
    ]
    header = (
        "configuration",
        "ceiling",
        "tasks",
        "trials",
        "score [CI]",
        "bootstrap CI",
        "Wilson CI",
        "clean score [CI]",
        "infra error rate [CI]",
    )
    return _table(header, rows)


def _comparisons(summary: RunSummary) -> str:
    if not summary.comparisons:
        return "<p class='note'>One configuration only: nothing to compare.</p>"
    out = []
    for comparison in summary.comparisons:
        family = len(comparison.pairs)
        out.append(f"<h3>{_e(comparison.metric)} by {_e(comparison.by)}</h3><ul>")
        for pair in comparison.pairs:
            note = f" ({_e(f.within(pair.within))}; {pair.estimate.n_tasks} tasks, {pair.method})"
            line = f.verdict(pair, 1 - comparison.level, family)
            out.append(f"<li><span class='verdict'>{_e(line)}</span>{note}")
            if pair.only_a or pair.only_b:
                out.append(f"<br><span class='warn'>not paired: {_e(f.unmatched(pair))}</span>")
            out.append("</li>")
        out.append("</ul>")
    return "\n".join(out)


def _decomposition(summary: RunSummary) -> str:
    if not summary.decompositions:
        return "<p class='note'>One policy only: nothing to decompose.</p>"
    rows = [
        (
            f"{d.before} → {d.after}",
            f.within(d.within),
            str(d.n_tasks),
            f"{f.pts(d.delta_score, True)} {f.interval(d.delta_score_ci, True)}",
            f"{f.pts(d.noise_removal, True)} {f.interval(d.noise_removal_ci, True)}",
            f"{f.pts(d.capability_unlock, True)} {f.interval(d.capability_unlock_ci, True)}",
        )
        for d in summary.decompositions
    ]
    header = ("policies", "where", "tasks", "Δ score", "noise removal", "capability unlock")
    caption = (
        "<p class='note'>score = (1 − e)·c; symmetric split, exact: noise removal = −Δe·c̄, "
        "capability unlock = Δc·(1 − ē). Paired task bootstrap CIs. An OOM kill counts as the "
        "agent's failure in a step when its path was killed at that ceiling and every tighter "
        "one and still needs more once lifted.</p>"
    )
    notes = "".join(
        f"<p class='note'>{_e(f.strategy_note(d))}</p>"
        for d in summary.decompositions
        if d.strategy_kills
    )
    return _table(header, rows) + caption + notes


def _calibration(summary: RunSummary) -> str:
    if not summary.calibration:
        return "<p class='note'>Needs at least two policies per agent.</p>"
    out = []
    for c in summary.calibration:
        out.append(
            f"<p><b>{_e(f.within(c.within))}</b>: reference {_e(c.reference)} (ceiling "
            f"{_e(f.ceiling(c.reference_ceiling))}), margin ±{f.pts(c.margin)} pts → "
            f"<b>{_e(f.advice(c))}</b></p>"
        )
        rows = [
            (
                k.policy,
                f.ceiling(k.ceiling),
                f"{f.pts(k.diff, True)} {f.interval(k.ci90, True)}",
                f.p_value(k.p_tost),
                k.verdict,
                f.pts(k.infra_error_rate),
                "" if math.isnan(k.tasks_needed) else f"{int(k.tasks_needed)} tasks",
            )
            for k in c.checks
        ]
        header = (
            "policy",
            "ceiling",
            "Δ score [90 % CI]",
            "p TOST",
            "verdict",
            "infra errors",
            "tasks to decide",
        )
        out.append(_table(header, rows))
    return "\n".join(out)


def _hidden(summary: RunSummary) -> str:
    hidden = summary.hidden
    if hidden is None:
        return "<p class='note'>No host variable varied in this run.</p>"
    if not hidden.estimable:
        return f"<p class='note'>{_e(hidden.note)}</p>"
    rows = [
        (
            c.name,
            f.log_odds(c.coef, c.ci),
            f"{c.odds_ratio:.3f}",
            f.p_value(c.p_value),
        )
        for c in hidden.coefficients
    ]
    note = (
        f"<p class='note'>Logit of passing with task and configuration fixed effects, SE "
        f"clustered by task; {hidden.n_rows} trials on {hidden.n_tasks} tasks "
        f"({hidden.dropped_tasks} tasks with constant outcome left out). {_e(hidden.note)}</p>"
    )
    if hidden.left_out:
        note += f"<p class='note'>Left out: {_e('; '.join(hidden.left_out))}</p>"
    return _table(("variable", "log-odds per unit [CI]", "odds ratio", "p"), rows) + note


def _time(summary: RunSummary) -> str:
    """Score and infra errors by hour and window, the windows test, node health, left-outs."""
    time, out = summary.time, []
    if time is not None and time.by_hour:
        out.append(_table(("hour", *timing.SLOT_HEADER[1:]), timing.slot_rows(time.by_hour)))
    if time is not None and len(time.by_window) > 1:
        out.append(_table(("window", *timing.SLOT_HEADER[1:]), timing.slot_rows(time.by_window)))
    if time is not None and time.window_tests:
        out.append("<p>Do the windows differ? Friedman's statistic on the per-task scores' ranks "
                   "within each task; p from permuting them, Holm over configurations.</p>")
        out.append(_table(timing.TEST_HEADER, timing.test_rows(summary)))
    if summary.nodes:
        out.append(_table(timing.NODE_HEADER, timing.node_rows(summary)))
    return "\n".join(out) or "<p class='note'>One window, no hour of day or host health.</p>"


def markdown_html(text: str) -> str:
    """The disclosure card's Markdown subset (headings, pipe tables, paragraphs) as HTML."""
    out: list[str] = []
    table: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(c and set(c) <= set("-:") for c in cells):  # skip the |---| rule
                table.append(cells)
            continue
        if table:
            out.append(_table(table[0], table[1:]))
            table = []
        if line.startswith("#"):
            level = min(4, len(line) - len(line.lstrip("#")) + 2)
            out.append(f"<h{level}>{_e(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{_e(line.replace('`', ''))}</p>")
    return "\n".join(out)
