"""The HTML report rendered by a real browser: headless Chromium loads the file with networking
off, and the DOM it builds must hold the four plots. A screenshot is written beside it for a human
to look at. Chromium missing: skipped with the reason, but failed when CI=true."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from levelfield.analysis import summarize
from levelfield.analysis.simulate import simulate_trials
from levelfield.report import render_html
from tests.integration._chromium import chromium, find_browser

PLOTS = ("fig-ceiling", "fig-sensitivity", "fig-reasons", "fig-memory")


@pytest.fixture(scope="module")
def browser() -> str:
    return find_browser()


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trials = simulate_trials(n_tasks=40, agents=("agent-a", "agent-b"), repeats=3, seed=11)
    summary = summarize(trials, info={"run_id": "chromium-check"}, n_resamples=300)
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_html(summary), encoding="utf-8")
    return path


@pytest.mark.slow
def test_chromium_dom_holds_every_plot(browser: str, page: Path, tmp_path: Path) -> None:
    done = chromium(browser, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    assert re.findall(r"<svg id=\"(fig-[a-z]+)\"", dom) == list(PLOTS)
    assert dom.count("<table") >= 4 and "Disclosure card" in dom
    for plot in PLOTS:  # each plot drew something: paths inside its svg
        body = dom.split(f'id="{plot}"', 1)[1].split("</svg>", 1)[0]
        assert body.count("<path") > 10, plot


@pytest.mark.slow
def test_chromium_screenshot_is_written(browser: str, page: Path, tmp_path: Path) -> None:
    shot = Path(os.environ.get("LEVELFIELD_SCREENSHOT", tmp_path / "report.png"))
    done = chromium(
        browser,
        tmp_path / "profile",
        "--window-size=1200,4200",
        f"--screenshot={shot}",
        page.as_uri(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a blank page is a few kB
