"""Analysis results → rich tables on a terminal. Every number is printed with its interval, and a
comparison ends in a one-line verdict, because a bare score invites reading noise as a ranking."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from levelfield.analysis.calibration import Calibration
from levelfield.analysis.hidden import HiddenVariables
from levelfield.analysis.paired import Comparison
from levelfield.analysis.power import PowerAnalysis
from levelfield.analysis.summary import ConfigSummary, RunSummary
from levelfield.records import KILLED_CAUSE_UNKNOWN
from levelfield.report import _format as f
from levelfield.report import timing
from levelfield.report.markdown import model_budget

TOP_TASKS = 10
PAIRS_SHOWN = 45  # all pairs of 10 configurations; beyond that the report counts the rest


def show_summary(summary: RunSummary, console: Console | None = None) -> None:
    """The whole run: scores, comparisons, decomposition, calibration, sensitive tasks, hidden."""
    console = console or Console()
    console.print(f"[bold]run {f.info_value(summary.info, 'run_id')}[/bold]")
    budget = model_budget(summary.info)
    if budget not in ("none", "unknown"):
        console.print(f"model budget per trial: {budget}", markup=False)
    if summary.provenance.images:
        console.print(f"images: {', '.join(summary.provenance.images)}", markup=False)
    for drift in summary.provenance.image_drift:
        console.print(f"[bold yellow]image drift[/]: {drift}")
    console.print(scores_table(summary))
    for c in summary.configs:
        if c.killed_cause_unknown:
            console.print(
                f"[yellow]{f.label(c)}[/]: {c.killed_cause_unknown} of {c.n_trials} trials "
                f"{KILLED_CAUSE_UNKNOWN} (the agent died by SIGKILL, with no exception or kernel "
                "evidence to say why; an OOM kill would be infrastructure's, so they count as "
                "their reward says)"
            )
    for comparison in summary.comparisons:
        show_comparison(comparison, console, limit=PAIRS_SHOWN)
    for d in summary.decompositions:
        console.print(
            f"{d.before} → {d.after} ({f.within(d.within)}): Δscore {f.pts(d.delta_score, True)} "
            f"{f.interval(d.delta_score_ci, True)} = noise removal "
            f"{f.pts(d.noise_removal, True)} {f.interval(d.noise_removal_ci, True)} + capability "
            f"unlock {f.pts(d.capability_unlock, True)} {f.interval(d.capability_unlock_ci, True)}"
        )
        if d.strategy_kills:
            console.print(f"  [dim]{f.strategy_note(d)}[/dim]")
    for calibration in summary.calibration:
        console.print(calibration_table(calibration))
    if summary.sensitivity:
        console.print(sensitivity_table(summary))
    if summary.hidden is not None and summary.hidden.estimable:
        console.print(hidden_table(summary.hidden))
    elif summary.hidden is not None:
        console.print(f"hidden variables: {summary.hidden.note}")
    for part in timing.terminal_tables(summary):
        console.print(part)


def scores_table(summary: RunSummary) -> Table:
    pct = round(100 * summary.level)
    table = Table(
        title=f"Scores, points ({pct} % CI clustered by task; bootstrap {summary.n_resamples}×, "
        f"seed {summary.seed}; Wilson ignores clustering)"
    )
    for name in ("configuration", "ceiling", "tasks", "trials", "K"):
        table.add_column(name, justify="left" if name == "configuration" else "right")
    for name in ("score", "bootstrap", "Wilson", "clean score", "infra error rate"):
        table.add_column(name, justify="right")
    for c in summary.configs:
        table.add_row(*_score_row(c))
    return table


def _score_row(c: ConfigSummary) -> list[str]:
    k = str(c.repeats[0]) if c.repeats[0] == c.repeats[1] else f"{c.repeats[0]}–{c.repeats[1]}"
    return [
        f.label(c),
        f.ceiling(c.ceiling),
        str(c.n_tasks),
        str(c.n_trials),
        k,
        f.metric(c.score),
        f.interval(c.score.boot_ci),
        f.interval(c.score.wilson_ci),
        f.metric(c.clean_score),
        f.metric(c.infra_error_rate),
    ]


def show_comparison(
    comparison: Comparison, console: Console | None = None, limit: int | None = None
) -> None:
    """One verdict line per pair, then any tasks left out of the pairing. With `limit`, the
    first `limit` pairs and a count of the rest: a leaderboard of 55 configurations has 1,485
    pairs, which no one reads on a terminal (JSON and HTML keep them all)."""
    console = console or Console()
    alpha = 1 - comparison.level
    family = len(comparison.pairs)
    console.print(
        f"[bold]{comparison.metric} by {comparison.by}[/bold] (paired by task, "
        f"{round(100 * comparison.level)} % CI, Holm over {family} pair(s))"
    )
    shown = comparison.pairs if limit is None else comparison.pairs[:limit]
    lines = []
    for pair in shown:
        where = f.within(pair.within)
        line = escape(f.verdict(pair, alpha, family))
        lines.append(
            f"  {line}  [dim]({escape(where) + '; ' if where else ''}"
            f"{pair.estimate.n_tasks} tasks, {pair.method})[/dim]"
        )
        if pair.only_a or pair.only_b:
            lines.append(f"    [yellow]not paired: {escape(f.unmatched(pair))}[/yellow]")
    if len(shown) < family:
        told = sum(1 for p in comparison.pairs if p.p_holm < alpha)
        lines.append(
            f"  [dim]… and {family - len(shown):,} more pairs ({told:,} of all {family:,} "
            "distinguishable after Holm): every pair is in --json and --html; `levelfield "
            "leaderboard RUN` ranks the configurations with their ranks' confidence sets[/dim]"
        )
    console.print("\n".join(lines))


def calibration_table(c: Calibration) -> Table:
    table = Table(
        title=f"Calibration ({f.within(c.within)}): reference {c.reference} "
        f"(ceiling {f.ceiling(c.reference_ceiling)}, infra errors "
        f"{f.pts(c.reference_infra_error_rate)}), TOST margin ±{f.pts(c.margin)} pts",
        caption=f.advice(c),
    )
    for name in ("policy", "ceiling", "Δ score [90 % CI]", "p TOST", "verdict", "infra errors"):
        table.add_column(name, justify="left" if name in ("policy", "verdict") else "right")
    table.add_column("to decide")
    for check in c.checks:
        table.add_row(
            check.policy,
            f.ceiling(check.ceiling),
            f"{f.pts(check.diff, True)} {f.interval(check.ci90, True)}",
            f.p_value(check.p_tost),
            check.verdict,
            f.pts(check.infra_error_rate),
            _needed(check.tasks_needed, check.repeats_needed, check.n_tasks),
        )
    return table


def _needed(tasks: float, repeats: float, n_tasks: int) -> str:
    if math.isnan(tasks):
        return ""
    text = f"+{int(tasks) - n_tasks} tasks"
    if not math.isnan(repeats):
        text += " or " + ("no K suffices" if math.isinf(repeats) else f"K = {int(repeats)}")
    return text


def sensitivity_table(summary: RunSummary) -> Table:
    table = Table(
        title=f"Resource-sensitive tasks (top {TOP_TASKS} of {len(summary.sensitivity)}): "
        "per policy, score, OOM kills, mean CPU throttled s, max peak memory / spec"
    )
    for name in ("task", "where", "spread", "score", "OOM kills", "throttled s", "peak / spec"):
        table.add_column(name, justify="left" if name in ("task", "where") else "right")
    for row in summary.sensitivity[:TOP_TASKS]:
        table.add_row(
            row.task,
            f.within(row.within),
            f.pts(row.spread),
            _per_policy(row.scores, lambda v: f.pts(v)),
            _per_policy(row.oom_kills, lambda v: f"{v:g}"),
            _per_policy(row.cpu_throttled_s, lambda v: f"{v:.1f}"),
            _per_policy(row.peak_over_spec, lambda v: f"{v:.2f}"),
        )
    return table


def _per_policy(values: dict[str, float], fmt: Callable[[float], str]) -> str:
    """One line per policy, so wide sweeps stay readable; blank when not recorded."""
    return "\n".join(f"{p} {fmt(v)}" for p, v in values.items() if not math.isnan(v))


def hidden_table(hidden: HiddenVariables) -> Table:
    table = Table(
        title=f"Hidden variables: logit of passing, task + configuration fixed effects, SE "
        f"clustered by task ({hidden.n_rows} trials, {hidden.n_tasks} tasks)",
        caption=hidden.note,
    )
    for name in ("variable", "log-odds per unit [CI]", "odds ratio", "p"):
        table.add_column(name, justify="left" if name == "variable" else "right")
    for c in hidden.coefficients:
        table.add_row(
            c.name,
            f.log_odds(c.coef, c.ci),
            f"{c.odds_ratio:.3f}",
            f.p_value(c.p_value),
        )
    return table


def show_power(power: PowerAnalysis, console: Console | None = None) -> None:
    console = console or Console()
    console.print(
        f"To detect a gap of {f.pts(power.gap)} pts at α = {power.alpha:g} with power "
        f"{power.power:g} (paired, Miller 2024): {_tasks(power.tasks_needed)} tasks at the "
        f"measured K = {power.measured_repeats:g} (measured on {power.measured_tasks} tasks: "
        f"{power.source})"
    )
    table = Table(
        title=f"Var_task(diff) = {power.var_task_diff:.4f}, E[σ²] = {power.mean_within_var:.4f}"
    )
    for name in ("repeats K", "tasks needed", "trials per configuration"):
        table.add_column(name, justify="right")
    for row in power.rows:
        table.add_row(str(row.repeats), _tasks(row.tasks), _tasks(row.trials))
    console.print(table)


def _tasks(n: float) -> str:
    return "n/a" if math.isnan(n) else f"{math.ceil(n):,}"
