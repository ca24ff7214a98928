"""The analysis commands: `results`, `report`, `compare`, `power` and `leaderboard`. Each parses,
makes one library call and renders.

Kept importable without the statistics stack: everything heavy is imported inside the command that
needs it, so `levelfield run` never pays for pandas or statsmodels at start.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from levelfield.cli._console import (
    bad_input,
    console,
    load_run_dir,
    show_adaptive_sections,
    wide_console,
)
from levelfield.cli._options import RunDir, Seed, parse_points

if TYPE_CHECKING:
    import pandas as pd

    from levelfield.analysis.table import RunData


def results(
    run_dir: RunDir,
    json_out: Annotated[
        bool, typer.Option("--json", help="Every trial as JSON, evidence and telemetry included.")
    ] = False,
) -> None:
    """One row per stored trial: outcome, reason, peak memory, throttling, durations."""
    from levelfield.report.results import results_json, results_table
    from levelfield.store import reading

    with reading(run_dir) as store:
        records = list(store.records())
    if json_out:
        typer.echo(results_json(records))
    else:
        console.print(results_table(records))


def report(
    run_dir: RunDir,
    html: Annotated[Path | None, typer.Option(help="Write one self-contained HTML file.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print every figure as JSON.")] = False,
    card: Annotated[bool, typer.Option(help="Print the Markdown disclosure card.")] = False,
    margin: Annotated[str, typer.Option(help="Equivalence margin for calibration.")] = "2pp",
    seed: Seed = 0,
) -> None:
    """Scores with CIs, paired comparisons, calibration across ceilings, sensitive tasks."""
    from levelfield.analysis.summary import summarize
    from levelfield.report import render_card, render_json, show_summary

    margin_value = parse_points(margin)
    data = load_run_dir(run_dir)
    with bad_input():
        summary = summarize(data.trials, info=data.info, seed=seed, margin=margin_value)
    if html is not None:
        from levelfield.report.html import render_html  # matplotlib: only for the page

        _write_page(html, render_html(summary))
    if json_out:
        typer.echo(render_json(summary))
    elif card:
        typer.echo(render_card(summary))
    elif html is None:
        show_summary(summary, wide_console())
        show_adaptive_sections(data, wide_console())


def compare(
    run_a: RunDir,
    run_b: Annotated[Path | None, typer.Argument(help="A second run to compare with.")] = None,
    by: Annotated[str | None, typer.Option(help="policy, agent (or run, window).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Paired comparison by task: one run's policies or agents, or run A against run B."""
    from levelfield.analysis.paired import compare as compare_trials
    from levelfield.report import render_json, show_comparison

    by = by or ("run" if run_b else "policy")
    if by not in ("policy", "agent", "run", "window") or (by == "run" and run_b is None):
        raise typer.BadParameter(f"cannot compare by {by!r} here", param_hint="--by")
    trials, order = _stack([load_run_dir(run_a)] + ([load_run_dir(run_b)] if run_b else []))
    with bad_input():
        result = compare_trials(trials, by=by, order=order if by == "run" else None)
    if not result.pairs:
        Console(stderr=True).print(f"[yellow]nothing to compare: one {by} only[/yellow]")
        raise typer.Exit(2)
    if json_out:
        typer.echo(render_json(result))
    else:
        show_comparison(result, wide_console())


def _stack(runs: list[RunData]) -> tuple[pd.DataFrame, list[str]]:
    """Two runs become one table with a `run` column (their run ids, or A and B)."""
    import pandas as pd

    if len(runs) == 1:
        return runs[0].trials, []
    names = [str(r.info.get("run_id") or side) for r, side in zip(runs, "AB", strict=True)]
    names = names if names[0] != names[1] else ["A", "B"]
    frames = [r.trials.assign(run=n) for r, n in zip(runs, names, strict=True)]
    return pd.concat(frames, ignore_index=True), names


def power(
    from_run: Annotated[Path, typer.Option("--from", help="Run whose variances to use.")],
    gap: Annotated[str, typer.Option(help="Smallest gap to detect: 2pp = 2 points.")] = "2pp",
    level: Annotated[
        float, typer.Option(help="Two-sided significance level α (0.05) or confidence (0.95).")
    ] = 0.05,
    power_: Annotated[float, typer.Option("--power", help="Probability to detect.")] = 0.8,
    by: Annotated[str, typer.Option(help="Which pairs to measure: policy or agent.")] = "policy",
) -> None:
    """Tasks (and repeats) needed to detect a gap, from the variances this run measured."""
    from levelfield.analysis.power import power_analysis
    from levelfield.report import show_power

    if not (0 < level < 1 and 0 < power_ < 1):
        raise typer.BadParameter("--level and --power must lie strictly between 0 and 1")
    alpha, gap_value = (1 - level if level > 0.5 else level), parse_points(gap)
    data = load_run_dir(from_run)
    with bad_input():
        result = power_analysis(data.trials, gap=gap_value, alpha=alpha, power=power_, by=by)
    show_power(result, wide_console())


def leaderboard(
    run_dir: RunDir,
    json_out: Annotated[bool, typer.Option("--json", help="Print every figure as JSON.")] = False,
    html: Annotated[
        Path | None, typer.Option(help="Write one self-contained HTML page with a forest plot.")
    ] = None,
    markdown: Annotated[
        bool, typer.Option(help="Print the table and findings as Markdown.")
    ] = False,
) -> None:
    """Is #1 really #1? Ranks every configuration (an imported submission) with its
    task-clustered CI, the paired gap to the next and to #1 (Holm), simultaneous confidence
    sets for the ranks, tiers, and the smallest gap the design can detect. Deterministic: no
    seed, nothing drawn at random."""
    from levelfield.analysis.standings import leaderboard as rank_entries
    from levelfield.report.leaderboard import render_json, render_markdown, show_leaderboard

    data = load_run_dir(run_dir)
    with bad_input():
        board = rank_entries(data.trials, info=data.info)
    if html is not None:
        from levelfield.report.leaderboard_html import render_leaderboard_html

        _write_page(html, render_leaderboard_html(board))
    if json_out:
        typer.echo(render_json(board))
    elif markdown:
        typer.echo(render_markdown(board))
    elif html is None:
        show_leaderboard(board, wide_console())


def _write_page(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    Console(stderr=True).print(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add `results`, `report`, `compare`, `power` and `leaderboard`."""
    app.command("results")(results)
    app.command("report")(report)
    app.command("compare")(compare)
    app.command("power")(power)
    app.command("leaderboard")(leaderboard)
