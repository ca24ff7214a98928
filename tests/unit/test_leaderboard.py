"""The leaderboard against independent references: the score convention recomputed with pandas,
the leaderboard's ± worked by hand from its SQL formula, the gaps' differences from the per-task
table and their Holm adjustment from statsmodels, the detectable gap from statsmodels' power
solver; and its renderers and command."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from rich.console import Console
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import NormalIndPower
from typer.testing import CliRunner

from levelfield.analysis.power import detectable_gap, required_tasks
from levelfield.analysis.simulate import simulate_trials
from levelfield.analysis.standings import leaderboard, retry_se
from levelfield.analysis.table import RunData
from levelfield.cli.analysis import register
from levelfield.report.leaderboard import findings, render_json, render_markdown, show_leaderboard
from levelfield.report.leaderboard_html import render_leaderboard_html

AGENTS = ("alpha", "beta", "gamma", "delta", "epsilon")


@pytest.fixture(scope="module")
def trials() -> pd.DataFrame:
    frame = simulate_trials(
        n_tasks=40, agents=AGENTS, policies={"imported": math.nan}, repeats=5, seed=11
    )
    return frame.assign(
        sandbox_provider=frame["agent"].map(lambda a: "modal" if a == "beta" else "docker")
    )


@pytest.fixture(scope="module")
def board(trials: pd.DataFrame):  # type: ignore[no-untyped-def]
    return leaderboard(trials)


def test_scores_follow_the_leaderboard_convention(trials: pd.DataFrame, board) -> None:  # type: ignore[no-untyped-def]
    passed = trials.assign(p=(trials["status"] == "passed").astype(float))
    expected = passed.groupby(["agent", "task"], observed=True)["p"].mean().groupby("agent").mean()
    got = {e.label: e.score.mean for e in board.entries}
    assert got == pytest.approx(expected.to_dict(), abs=1e-12)
    assert [e.score.mean for e in board.entries] == sorted(got.values(), reverse=True)


def test_retry_se_is_the_leaderboards_formula_worked_by_hand() -> None:
    # sqrt(sum p(1 − p) / (K − 1)) / n: (0 + 0.24/4 + 0.16/4) = 0.1, over 3 tasks.
    assert retry_se(np.array([1.0, 0.6, 0.2]), np.array([5, 5, 5])) == pytest.approx(
        math.sqrt(0.1) / 3
    )
    assert math.isnan(retry_se(np.array([1.0, 0.0]), np.array([5, 1])))


def test_gaps_are_paired_differences_with_holm_over_their_family(
    trials: pd.DataFrame, board
) -> None:  # type: ignore[no-untyped-def]
    per_task = (
        trials.assign(p=(trials["status"] == "passed").astype(float))
        .groupby(["agent", "task"], observed=True)["p"]
        .mean()
        .unstack("task")
    )
    order = [e.label for e in board.entries]
    nexts = [g for g in board.gaps if g.to == "next"]
    firsts = [g for g in board.gaps if g.to == "first"]
    assert [(g.pair.a, g.pair.b) for g in nexts] == list(itertools.pairwise(order))
    assert [(g.pair.a, g.pair.b) for g in firsts] == [(order[0], b) for b in order[1:]]
    for gap in board.gaps:
        d = per_task.loc[gap.pair.a] - per_task.loc[gap.pair.b]
        assert gap.pair.estimate.diff == pytest.approx(d.mean())
        assert gap.pair.estimate.se == pytest.approx(d.std(ddof=1) / math.sqrt(d.size))
    family = {(g.pair.a, g.pair.b): g.pair for g in board.gaps}
    expected = multipletests([p.p_value for p in family.values()], method="holm")[1]
    assert [p.p_holm for p in family.values()] == pytest.approx(list(expected))


def test_ranks_tiers_and_first_set_hang_together(board) -> None:  # type: ignore[no-untyped-def]
    first = set(board.ranks.could_be_first)
    assert first == {e.label for e in board.entries if e.tier == 1}
    assert board.entries[0].label in first
    for e in board.entries:  # no one is proven better than an entry that scores higher
        assert e.simultaneous[0] <= e.rank <= e.simultaneous[1]
        assert e.simultaneous[0] <= e.marginal[0] <= e.marginal[1] <= e.simultaneous[1]


def test_detectable_gap_is_statsmodels_power_solved_for_the_effect() -> None:
    var_task_diff, within, k, n = 0.08, 0.3, 5, 89
    sd = math.sqrt(var_task_diff + within / k)
    effect = NormalIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8, ratio=0)
    assert detectable_gap(var_task_diff, within, k, n) == pytest.approx(effect * sd, rel=1e-3)
    gap = detectable_gap(var_task_diff, within, k, n)
    assert required_tasks(gap, var_task_diff, within, k) == pytest.approx(n)
    assert detectable_gap(var_task_diff, within, math.inf, n) < gap
    assert math.isnan(detectable_gap(math.nan, math.nan, math.inf, n))  # K = 1: unknown


def test_provider_confound_and_infra_kinds(board) -> None:  # type: ignore[no-untyped-def]
    assert board.providers_confounded
    assert {p.name: p.entries for p in board.providers}["modal"] == ("beta",)
    kinds = {kind for e in board.entries for kind in e.infra_by_kind}
    assert kinds <= {"oom_killed", "sandbox_error"} and kinds
    for e in board.entries:
        assert sum(e.infra_by_kind.values()) == pytest.approx(e.infra_error_rate)


def test_renderers_say_the_same_findings(board, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(render_json(board))
    assert len(data["entries"]) == len(AGENTS)
    markdown = render_markdown(board)
    page = render_leaderboard_html(board)
    console = Console(width=250, record=True, color_system=None)
    show_leaderboard(board, console)
    text = console.export_text()
    for line in findings(board):
        assert line in markdown
        assert line.split(":")[0] in text
    assert '<svg id="fig-forest"' in page and "<script" not in page
    assert "could be #1" in findings(board)[0]


def test_one_configuration_is_not_a_leaderboard(trials: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="at least two"):
        leaderboard(trials[trials["agent"] == "alpha"])


def test_cli_leaderboard_variants(
    trials: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lb").mkdir()
    monkeypatch.setattr(
        "levelfield.analysis.table.load_run", lambda run_dir: RunData({"run_id": "lb"}, trials)
    )
    app = typer.Typer()
    register(app)
    run = CliRunner().invoke
    out = run(app, ["leaderboard", str(tmp_path / "lb")])
    assert out.exit_code == 0, out.output
    assert "could be #1" in out.output and "tier" in out.output
    assert (
        len(json.loads(run(app, ["leaderboard", str(tmp_path / "lb"), "--json"]).output)["entries"])
        == 5
    )
    assert run(app, ["leaderboard", str(tmp_path / "lb"), "--markdown"]).output.startswith(
        "| rank |"
    )
    page = tmp_path / "lb.html"
    assert run(app, ["leaderboard", str(tmp_path / "lb"), "--html", str(page)]).exit_code == 0
    assert "fig-forest" in page.read_text()
    monkeypatch.setattr(
        "levelfield.analysis.table.load_run",
        lambda run_dir: RunData({}, trials[trials["agent"] == "alpha"]),
    )
    lonely = run(app, ["leaderboard", str(tmp_path / "lb")])
    assert lonely.exit_code == 2 and "at least two" in lonely.output


def test_exact_ties_share_the_score_rank_and_the_clean_rank() -> None:
    """Passes 1, 2, 7, 6 of 10 on four tasks, and 7, 2, 1, 6: the same score, 16/40, which float
    sums in task order make 0.4 and 0.39999999999999997; an infra error on each one's last task
    leaves the clean scores tied too."""
    rows = []
    for agent, passes in (("a", (1, 2, 7, 6)), ("b", (7, 2, 1, 6)), ("c", (1, 1, 1, 1))):
        for t, n in enumerate(passes):
            for r in range(10):
                status = "passed" if r < n else "failed"
                if t == 3 and r == 9:
                    status = "infra_error"
                rows.append((f"t{t}", agent, "imported", r + 1, status, "tests_failed"))
    trials = pd.DataFrame(rows, columns=["task", "agent", "policy", "repeat", "status", "reason"])
    board = leaderboard(trials)
    entries = {e.label: e for e in board.entries}
    assert (entries["a"].rank, entries["b"].rank, entries["c"].rank) == (1, 1, 3)
    assert entries["a"].clean_rank == entries["b"].clean_rank == 1
    assert [e.label for e in board.entries] == ["a", "b", "c"]  # ties: by name
    expected = float(sum(Fraction(n, 10) for n in (1, 2, 7, 6)) / 4)
    assert entries["a"].score.mean == pytest.approx(expected)
    # the infra error rate: the mean over tasks of each task's share (report's definition)
    assert entries["a"].infra_error_rate == pytest.approx((0 + 0 + 0 + 0.1) / 4)
