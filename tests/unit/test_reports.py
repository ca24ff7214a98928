"""Reports format the summary faithfully: verdict lines, the disclosure card ("unknown" where the
run is silent), strict JSON, one self-contained HTML page; and the CLI commands parse, call, render.
The run loader is replaced by a function returning simulated trials (no store needed)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

import levelfield.analysis
import levelfield.report
from levelfield.analysis import compare, power_analysis, summarize
from levelfield.analysis.simulate import simulate_trials
from levelfield.analysis.table import RunData
from levelfield.cli._options import parse_points
from levelfield.cli.analysis import register
from levelfield.report import (
    render_card,
    render_html,
    render_json,
    show_comparison,
    show_power,
    show_summary,
)

INFO = {
    "run_id": "r-123",
    "harness_version": "0.1.0",
    "backend": "process",
    "enforcement": "cgroup v2 memory.max + cpu.max + pids.max; bubblewrap namespaces",
    "host": {"host_id": "box", "cpus": 2, "memory_bytes": 8 * 2**30, "kernel": "6.1.0"},
    "policies": {
        "strict": {"memory": {"floor": "1x", "ceiling": "1x"}},
        "uncapped": {"memory": {"floor": "1x", "ceiling": None}},
    },
    "concurrency": 4,
    "model_features": {"openai": "store forced false", "gemini": "candidateCount capped at 1"},
}
VERDICT = re.compile(
    r"\S+ − \S+ = [+−]\d+\.\d pts \[[+−]\d+\.\d, [+−]\d+\.\d\], "
    r"p = [<\d. ]+(, Holm p = [<\d. ]+)?: (not distinguishable|distinguishable)"
)


@pytest.fixture(scope="module")
def trials() -> pd.DataFrame:
    return simulate_trials(n_tasks=24, agents=("a1", "a2"), repeats=2, seed=5)


@pytest.fixture(scope="module")
def summary(trials: pd.DataFrame) -> levelfield.analysis.RunSummary:
    return summarize(trials, info=INFO, n_resamples=200)


def _text(render: object, *args: object) -> str:
    console = Console(width=250, record=True, color_system=None)
    render(*args, console)  # type: ignore[operator]
    return console.export_text()


def test_terminal_summary_prints_intervals_and_verdicts(summary: object) -> None:
    text = _text(show_summary, summary)
    assert "run r-123" in text
    assert len(VERDICT.findall(text)) >= 6  # 3 policy pairs per agent + agent pairs
    assert re.search(r"\d+\.\d \[\d+\.\d, \d+\.\d\]", text)
    assert "noise removal" in text and "Calibration (agent a1)" in text


def test_comparison_verdict_line_reads_as_specified(trials: pd.DataFrame) -> None:
    text = _text(show_comparison, compare(trials, by="policy"))
    first = next(line for line in text.splitlines() if "uncapped − strict" in line)
    assert VERDICT.search(first), first


def test_power_table(trials: pd.DataFrame) -> None:
    text = _text(show_power, power_analysis(trials, gap=0.02))
    assert "To detect a gap of 2.0 pts" in text
    for k in (1, 2, 3, 5, 10):
        assert re.search(rf"│\s+{k} │\s+[\d,]+ │\s+[\d,]+ │", text), k


def test_card_has_every_field_and_unknown_when_missing(summary: object) -> None:
    card = render_card(summary)  # type: ignore[arg-type]
    for field in (
        "harness | levelfield 0.1.0",
        "backend | process",
        "cgroup v2 memory.max",
        "box, 2 CPUs, 8.0 GiB, kernel 6.1.0",
        "concurrency | 4",
        "trials per task | 2",
        "| strict | 1x | 1x |",
        "| uncapped | 1x | none |",
        "clean score",
        "relayed | gemini: candidateCount capped at 1; openai: store forced false |",
    ):
        assert field in card, field
    bare = summarize(simulate_trials(n_tasks=5, seed=1, telemetry=False), n_resamples=50)
    bare_card = render_card(bare)
    assert "run unknown" in bare_card and "| enforcement | unknown |" in bare_card
    assert "| agent's capabilities | unknown |" in bare_card
    assert "| model tools and features relayed | unknown |" in bare_card
    assert "| time span (UTC) | unknown – unknown |" in bare_card


def test_json_is_strict_and_marks_uncapped_as_inf(summary: object) -> None:
    text = render_json(summary)  # type: ignore[arg-type]
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert {c["labels"]["policy"]: c["ceiling"] for c in data["configs"]}["uncapped"] == "inf"
    first = data["configs"][0]["score"]
    assert set(first) == {"estimate", "boot_ci", "wilson_ci"}
    assert json.loads(summary.to_json()) == data  # type: ignore[attr-defined]


def test_html_is_one_self_contained_page_with_four_plots(summary: object) -> None:
    page = render_html(summary)  # type: ignore[arg-type]
    ids = re.findall(r"<svg id=\"(fig-[a-z]+)\"", page)
    assert ids == ["fig-ceiling", "fig-sensitivity", "fig-reasons", "fig-memory"]
    for fetch in ("<script", "<link", "<img", "@import", "url(http"):
        assert fetch not in page
    assert not re.search(r"(src|href)=['\"]https?:", page)
    assert "Disclosure card" in page and "reference strict (ceiling 1x)" in page


def test_html_without_telemetry_says_what_is_missing() -> None:
    bare = summarize(simulate_trials(n_tasks=6, seed=2, telemetry=False), n_resamples=50)
    page = render_html(bare)
    assert page.count("Not recorded in this run.") == 1  # memory; sensitivity has data
    assert "fig-memory" not in page


def test_parse_points() -> None:
    assert parse_points("2pp") == pytest.approx(0.02)
    assert parse_points("2.5 %") == pytest.approx(0.025)
    assert parse_points("0.02") == pytest.approx(0.02)
    assert parse_points("3") == pytest.approx(0.03)
    with pytest.raises(typer.BadParameter):
        parse_points("two")


def test_public_names_are_pinned() -> None:
    assert levelfield.analysis.__all__ == [
        "Calibration",
        "CeilingCheck",
        "Comparison",
        "ConfigSummary",
        "Decomposition",
        "Estimate",
        "HiddenVariables",
        "Metric",
        "PairedComparison",
        "PowerAnalysis",
        "RunSummary",
        "TaskSensitivity",
        "calibrate",
        "clustered_mean",
        "compare",
        "hidden_variables",
        "leaderboard",
        "power_analysis",
        "summarize",
        "task_sensitivity",
    ]
    assert levelfield.report.__all__ == [
        "render_card",
        "render_html",
        "render_json",
        "show_comparison",
        "show_power",
        "show_summary",
    ]
    for name in levelfield.analysis.__all__:
        assert getattr(levelfield.analysis, name) is not None


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, trials: pd.DataFrame, tmp_path: Path) -> object:
    runs = {"run-a": trials, "run-b": simulate_trials(n_tasks=24, agents=("a1", "a2"), seed=6)}
    for name in runs:
        (tmp_path / name).mkdir()

    def load_run(run_dir: Path) -> RunData:
        return RunData({**INFO, "run_id": Path(run_dir).name}, runs[Path(run_dir).name])

    monkeypatch.setattr("levelfield.analysis.table.load_run", load_run)
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(
        app, [str(tmp_path / a) if a.startswith("run-") else a for a in args]
    )


def test_cli_report_variants(cli: object, tmp_path: Path) -> None:
    out = cli("report", "run-a", "--seed", "3")  # type: ignore[operator]
    assert out.exit_code == 0, out.output
    assert "Scores" in out.output
    data = json.loads(cli("report", "run-a", "--json").output)  # type: ignore[operator]
    assert data["seed"] == 0 and data["margin"] == pytest.approx(0.02)
    assert "# Disclosure card" in cli("report", "run-a", "--card").output  # type: ignore[operator]
    page = tmp_path / "r.html"
    assert cli("report", "run-a", "--html", str(page), "--margin", "3pp").exit_code == 0  # type: ignore[operator]
    assert "±3.0 pts" in page.read_text()


def test_cli_compare_one_run_and_two_runs(cli: object) -> None:
    one = cli("compare", "run-a", "--by", "agent")  # type: ignore[operator]
    assert one.exit_code == 0 and "a1 − a2" in one.output
    two = cli("compare", "run-a", "run-b")  # type: ignore[operator]
    assert two.exit_code == 0 and "run-a − run-b" in two.output
    assert cli("compare", "run-a", "--by", "task").exit_code == 2  # type: ignore[operator]


def test_cli_power_and_bad_input(cli: object) -> None:
    out = cli("power", "--from", "run-a", "--gap", "2pp", "--level", "0.95")  # type: ignore[operator]
    assert out.exit_code == 0 and "α = 0.05" in out.output
    assert cli("power", "--from", "run-a", "--gap", "lots").exit_code == 2  # type: ignore[operator]
    assert cli("report", "missing-dir").exit_code == 2  # type: ignore[operator]


def test_a_table_breaking_the_contract_is_refused_with_a_reason(trials: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="status"):
        summarize(trials.drop(columns=["status"]))
    with pytest.raises(ValueError, match="unknown status"):
        summarize(trials.assign(status="crashed"))
    with pytest.raises(ValueError, match="no 'task'"):
        summarize(trials.assign(task=None))
    with pytest.raises(ValueError, match="empty"):
        summarize(trials.iloc[:0])


def test_cli_exits_2_on_a_broken_table(cli: object, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = RunData(
        {},
        pd.DataFrame(
            {"task": ["t"], "agent": ["a"], "policy": ["p"], "repeat": [0], "status": ["exploded"]}
        ),
    )
    monkeypatch.setattr("levelfield.analysis.table.load_run", lambda run_dir: broken)
    out = cli("report", "run-a")  # type: ignore[operator]
    assert out.exit_code == 2 and "unknown status" in out.output


def test_several_windows_are_summarised_and_compared_separately() -> None:
    first = simulate_trials(n_tasks=10, policies={"strict": 1.0}, seed=1).assign(window="night")
    second = simulate_trials(n_tasks=10, policies={"strict": 1.0}, seed=2).assign(window="day")
    result = summarize(pd.concat([first, second], ignore_index=True), n_resamples=50)
    assert [c.labels["window"] for c in result.configs] == ["day", "night"]
    assert [c.by for c in result.comparisons] == ["window"]
    assert (result.comparisons[0].pairs[0].a, result.comparisons[0].pairs[0].b) == ("day", "night")


def test_nan_prints_as_na_not_zero() -> None:
    from levelfield.report import _format

    assert _format.pts(math.nan) == "n/a" and _format.p_value(math.nan) == "n/a"
    assert _format.ceiling(math.inf) == "none" and _format.ceiling(math.nan) == "unknown"


def test_results_json_is_strict_json_whatever_a_record_holds() -> None:
    """A run stored before rewards were checked may hold a NaN reward: `results --json` writes
    null, never the bare NaN that strict parsers refuse."""
    from levelfield.report.results import results_json
    from tests.unit.test_store import record

    stored = record("k").model_copy(update={"reward": float("nan"), "duration_s": float("inf")})

    def refuse(token: str) -> None:
        raise ValueError(token)

    (parsed,) = json.loads(results_json([stored]), parse_constant=refuse)
    assert parsed["reward"] is None and parsed["duration_s"] == "inf"
