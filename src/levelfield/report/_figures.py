"""Run summary → the report's plots as inline SVG text (no file, no network at view time).

Figures are drawn on `matplotlib.figure.Figure` directly, never through pyplot, so rendering a
report leaves no global figure state behind and needs no display. `svg.hashsalt` is fixed so the
same summary gives the same bytes (reports diff cleanly). A figure whose data the run did not
record returns None, and the page says so instead of drawing an empty axis.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from contextlib import contextmanager

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from levelfield.analysis.summary import ConfigSummary, RunSummary
from levelfield.report import _format as f

MAX_SERIES = 12  # lines on one axis, each with its own colour and legend entry, still readable
HEATMAP_ROWS = 30  # beyond ~30 rows the task names stop being readable at page width
_RC = {"svg.hashsalt": "levelfield", "svg.fonttype": "path", "font.size": 9}
# Reason colours: greens for passes, greys for the agent's failures, warm for infrastructure.
_REASON_COLOURS = {
    "tests_passed": "#2e7d32",
    "passed": "#2e7d32",
    "tests_failed": "#9e9e9e",
    "failed": "#9e9e9e",
    "agent_timeout": "#bdbdbd",
    "agent_error": "#757575",
    "grader_broken": "#616161",
    "verifier_timeout": "#e0e0e0",
    "oom_killed": "#c62828",
    "pids_exhausted": "#ad1457",
    "storage_exhausted": "#6a1b9a",
    "sandbox_error": "#ef6c00",
    "host_pressure": "#f9a825",
    "node_lost": "#4e342e",
    "api_error": "#1565c0",
    "harness_error": "#000000",
    "infra_error": "#ef6c00",
}


@contextmanager
def svg(fig_id: str, out: list[str]) -> Iterator[Figure]:
    with mpl.rc_context(_RC):
        fig = Figure(layout="constrained")
        yield fig
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    out.append(text[text.index("<svg") :].replace("<svg ", f'<svg id="{fig_id}" role="img" ', 1))


def _series(summary: RunSummary) -> dict[str, list[ConfigSummary]]:
    """Configurations grouped into lines across policies (one line per agent/window/run)."""
    lines: dict[str, list[ConfigSummary]] = {}
    for c in summary.configs:
        lines.setdefault(f.label(c, skip=("policy",)), []).append(c)
    return lines


def _policy_axis(summary: RunSummary) -> tuple[list[str], list[str]]:
    policies = list(dict.fromkeys(c.labels["policy"] for c in summary.configs))
    ceilings = {c.labels["policy"]: c.ceiling for c in summary.configs}
    return policies, [f"{p}\n{f.ceiling(ceilings[p])}" for p in policies]


def ceiling_figure(summary: RunSummary) -> str | None:
    """Score (solid), clean score (dashed) and infra error rate against the ceiling, with the
    clustered CI as a band, one line per agent (and window/run). None past MAX_SERIES lines
    (a leaderboard's 55 submissions): the leaderboard's forest plot shows those."""
    if len(_series(summary)) > MAX_SERIES:
        return None
    policies, ticks = _policy_axis(summary)
    out: list[str] = []
    with svg("fig-ceiling", out) as fig:
        fig.set_size_inches(9, 3.6)
        left, right = fig.subplots(1, 2)
        for i, (name, configs) in enumerate(_series(summary).items()):
            colour = f"C{i % 10}"
            x = np.array([policies.index(c.labels["policy"]) for c in configs], float)
            for ax, attr, style, text in (
                (left, "score", "-", name),
                (left, "clean_score", "--", f"{name} (clean)"),
                (right, "infra_error_rate", "-", name),
            ):
                metric = [getattr(c, attr).estimate for c in configs]
                mean = np.array([100 * m.mean for m in metric])
                lo, hi = (np.array([100 * m.ci[j] for m in metric]) for j in (0, 1))
                if style == "--":  # the clean score: a line to compare against, no band
                    ax.plot(x, mean, "o--", color=colour, markersize=3, alpha=0.7, label=text)
                    continue
                ax.fill_between(x, lo, hi, color=colour, alpha=0.15)
                ax.errorbar(
                    x,
                    mean,
                    yerr=[mean - lo, hi - mean],
                    fmt="o-",
                    color=colour,
                    capsize=3,
                    label=text,
                )
        for ax, title in ((left, "score (points)"), (right, "infra error rate (points)")):
            ax.set_xticks(range(len(policies)), ticks)
            ax.set_xlabel("policy and memory ceiling (× spec)")
            ax.set_title(title)
            ax.grid(axis="y", alpha=0.3)
            ax.set_xlim(-0.3, len(policies) - 0.7)
        left.legend(fontsize=7, loc="best")
    return out[0]


def heatmap_figure(summary: RunSummary) -> str | None:
    """Per-task score by policy for the most resource-sensitive tasks; ✕ marks OOM kills."""
    rows = summary.sensitivity[:HEATMAP_ROWS]
    if not rows:
        return None
    policies, ticks = _policy_axis(summary)
    matrix = np.array([[r.scores.get(p, math.nan) for p in policies] for r in rows])
    out: list[str] = []
    with svg("fig-sensitivity", out) as fig:
        fig.set_size_inches(min(9, 3.5 + 1.1 * len(policies)), max(2.4, 1.2 + 0.24 * len(rows)))
        ax = fig.subplots()
        image = ax.imshow(100 * matrix, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
        for (i, j), value in np.ndenumerate(matrix):
            if math.isnan(value):
                continue
            ooms = rows[i].oom_kills.get(policies[j], math.nan)
            mark = " ✕" if ooms > 0 else ""
            ink = "white" if value < 0.15 or value > 0.85 else "black"  # legible on dark cells
            ax.text(
                j, i, f"{100 * value:.0f}{mark}", ha="center", va="center", fontsize=7, color=ink
            )
        where = [f.within(tuple(kv for kv in r.within if kv[0] != "window")) for r in rows]
        ax.set_yticks(
            range(len(rows)),
            [f"{r.task} ({w})" if w else r.task for r, w in zip(rows, where, strict=True)],
        )
        ax.set_xticks(range(len(policies)), ticks)
        ax.xaxis.tick_top()
        fig.colorbar(image, ax=ax, label="per-task score (points)", shrink=0.8)
    return out[0]


def reasons_figure(summary: RunSummary) -> str:
    """Share of trials by outcome reason for each configuration (stacked bars)."""
    reasons = sorted({r for c in summary.configs for r in c.reasons}, key=_reason_rank)
    out: list[str] = []
    with svg("fig-reasons", out) as fig:
        fig.set_size_inches(9, 1.4 + 0.32 * len(summary.configs))
        ax = fig.subplots()
        labels = [f.label(c) for c in summary.configs]
        left = np.zeros(len(labels))
        for reason in reasons:
            share = np.array([100 * c.reasons.get(reason, 0) / c.n_trials for c in summary.configs])
            ax.barh(
                labels, share, left=left, label=reason, color=_REASON_COLOURS.get(reason, "#90a4ae")
            )
            left += share
        ax.invert_yaxis()
        ax.set_xlim(0, 100)
        ax.set_xlabel("share of trials (%)")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return out[0]


def _reason_rank(reason: str) -> tuple[int, str]:
    order = list(_REASON_COLOURS)
    return (order.index(reason) if reason in order else len(order), reason)


def memory_figure(summary: RunSummary) -> str | None:
    """Peak memory / spec per configuration (box p25–p75, whiskers p5–p95, ◆ max), the spec
    (dashed, 1x) and each policy's ceiling (red bar)."""
    configs = [c for c in summary.configs if c.memory is not None]
    if not configs:
        return None
    out: list[str] = []
    with svg("fig-memory", out) as fig:
        fig.set_size_inches(9, 3.4)
        ax = fig.subplots()
        stats = [_box(c) for c in configs]
        ax.bxp(stats, showfliers=True, flierprops={"marker": "D", "markersize": 3})
        for i, c in enumerate(configs, start=1):
            if math.isfinite(c.ceiling):
                ax.hlines(c.ceiling, i - 0.4, i + 0.4, color="#c62828", linewidth=2)
        ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="spec (1x)")
        ax.set_xticks(
            range(1, len(configs) + 1),
            [f.label(c) for c in configs],
            rotation=20,
            ha="right",
            fontsize=7,
        )
        ax.set_ylabel("peak memory / spec")
        ax.plot([], [], color="#c62828", linewidth=2, label="memory ceiling")
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    return out[0]


def _box(c: ConfigSummary) -> dict[str, object]:
    assert c.memory is not None
    p5, p25, p50, p75, p95, top = c.memory.quantiles
    return {
        "whislo": p5,
        "q1": p25,
        "med": p50,
        "q3": p75,
        "whishi": p95,
        "fliers": [top],
        "label": f.label(c),
    }
