"""The analysis commands (`report`, `compare`, `power`): parse, one library call, render.

Kept apart from cli.py so that the run commands stay importable without the statistics stack:
everything heavy is imported inside the command that needs it. `register(app)` adds them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    import pandas as pd

    from levelfield.analysis.table import RunData

RunDir = Annotated[Path, typer.Argument(help="A run directory written by `levelfield run`.")]
Seed = Annotated[int, typer.Option(help="Seed of the bootstrap and permutation resamples.")]


def _console() -> Console:
    """Wide output when piped (CI logs, files), like cli.py's console: tables must not wrap."""
    return Console(width=None if Console().is_terminal else 200)


_POINTS = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(pp|pts?|points?|%)?\s*$")


def parse_points(text: str) -> float:
    """Points to a proportion: "2pp", "2 pts", "2%" → 0.02. A bare number below 1 is already a
    proportion ("0.02"), from 1 up it is points ("2"). Raises typer.BadParameter (exit 2)."""
    match = _POINTS.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r}: expected points such as 2pp, 2% or 0.02")
    value, unit = float(match.group(1)), match.group(2)
    return value / 100 if unit or value >= 1 else value


def _load(run_dir: Path) -> RunData:
    from levelfield.analysis.table import load_run

    if not run_dir.is_dir():
        raise typer.BadParameter(f"{run_dir} is not a directory", param_hint="RUN_DIR")
    data = load_run(run_dir)
    if data.trials.empty:
        Console(stderr=True).print(f"[red]error:[/] {run_dir} holds no trial yet")
        raise typer.Exit(1)
    return data


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
    from levelfield.report import render_card, render_html, render_json, show_summary

    margin_value = parse_points(margin)
    data = _load(run_dir)
    with _bad_input():
        summary = summarize(data.trials, info=data.info, seed=seed, margin=margin_value)
    if html is not None:
        html.write_text(render_html(summary), encoding="utf-8")
        Console(stderr=True).print(f"wrote {html}")
    if json_out:
        typer.echo(render_json(summary))
    elif card:
        typer.echo(render_card(summary))
    elif html is None:
        show_summary(summary, _console())
        show_adaptive_sections(data, _console())


def show_adaptive_sections(data: RunData, console: Console) -> None:
    """An adaptive sweep's target and repeats per task, and the cost when trials carry tokens."""
    from levelfield.adaptive import assess_run
    from levelfield.analysis.spend import sweep_cost
    from levelfield.report.adaptive import show_adaptive

    show_adaptive(assess_run(data.trials, data.info), sweep_cost(data.trials), console)


@contextmanager
def _bad_input() -> Iterator[None]:
    """A trial table that breaks the contract is bad input (exit 2), not a traceback."""
    try:
        yield
    except ValueError as exc:
        Console(stderr=True).print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


def compare(
    run_a: RunDir,
    run_b: Annotated[Path | None, typer.Argument(help="A second run to compare with.")] = None,
    by: Annotated[str | None, typer.Option(help="policy, agent (or run, window).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    seed: Seed = 0,
) -> None:
    """Paired comparison by task: one run's policies or agents, or run A against run B."""
    from levelfield.analysis.paired import compare as compare_trials
    from levelfield.report import render_json, show_comparison

    by = by or ("run" if run_b else "policy")
    if by not in ("policy", "agent", "run", "window") or (by == "run" and run_b is None):
        raise typer.BadParameter(f"cannot compare by {by!r} here", param_hint="--by")
    trials, order = _stack([_load(run_a)] + ([_load(run_b)] if run_b else []))
    with _bad_input():
        result = compare_trials(trials, by=by, seed=seed, order=order if by == "run" else None)
    if not result.pairs:
        Console(stderr=True).print(f"[yellow]nothing to compare: one {by} only[/yellow]")
        raise typer.Exit(2)
    if json_out:
        typer.echo(render_json(result))
    else:
        show_comparison(result, _console())


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
    data = _load(from_run)
    with _bad_input():
        result = power_analysis(data.trials, gap=gap_value, alpha=alpha, power=power_, by=by)
    show_power(result, _console())


def register(app: typer.Typer) -> None:
    """Add `report`, `compare` and `power` to the levelfield app."""
    app.command("report")(report)
    app.command("compare")(compare)
    app.command("power")(power)
