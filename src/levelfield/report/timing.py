"""Time and host health in the reports: score and infra-error rate by hour and by window, the
test of whether windows differ, the nodes whose health readings are far off, and the covariates the
hidden-variable fit left out. Rows are built once here; the terminal and the HTML page format them.
"""

from __future__ import annotations

from rich.table import Table

from levelfield.analysis.estimators import Estimate
from levelfield.analysis.summary import RunSummary
from levelfield.analysis.windows import Slot
from levelfield.report import _format as f

SLOT_HEADER = ("", "trials", "tasks", "score [CI]", "Wilson", "infra error rate [CI]", "Wilson")
TEST_HEADER = ("configuration", "windows", "tasks", "Friedman χ²", "p", "p Holm", "p χ²")
NODE_HEADER = ("node", "trials", "cpu stall %", "memory stall %", "io stall %", "steal %",
               "admission wait s", "flag")


def _estimate(e: Estimate) -> str:
    return f"{f.pts(e.mean)} {f.interval(e.ci)}"


def slot_rows(slots: tuple[Slot, ...]) -> list[tuple[str, ...]]:
    return [
        (
            s.label,
            str(s.n_trials),
            str(s.score.n_tasks),
            _estimate(s.score),
            f.interval(s.score_wilson),
            _estimate(s.infra_error_rate),
            f.interval(s.infra_wilson),
        )
        for s in slots
    ]


def test_rows(summary: RunSummary) -> list[tuple[str, ...]]:
    if summary.time is None:
        return []
    return [
        (
            f.within(t.within) or "all",
            ", ".join(t.windows),
            str(t.n_tasks),
            "n/a" if t.statistic != t.statistic else f"{t.statistic:.2f}",
            f"{f.p_value(t.p_value)} ({t.method})",
            f.p_value(t.p_holm),
            f.p_value(t.p_chi2),
        )
        for t in summary.time.window_tests
    ]


def node_rows(summary: RunSummary) -> list[tuple[str, ...]]:
    keys = ("cpu_pressure_pct", "memory_pressure_pct", "io_pressure_pct", "steal_pct",
            "admission_wait_s")

    def cell(value: float | None) -> str:
        return "n/a" if value is None or value != value else f"{value:.2f}"

    return [
        (n.node, str(n.n_trials), *(cell(n.medians.get(k)) for k in keys),
         "; ".join(n.flags) or "")
        for n in summary.nodes
    ]


def terminal_tables(summary: RunSummary) -> list[Table | str]:
    """What `show_summary` prints after the hidden variables."""
    out: list[Table | str] = []
    hidden = summary.hidden
    if hidden is not None and hidden.left_out:
        out.append("hidden variables left out: " + "; ".join(hidden.left_out))
    pct = round(100 * summary.level)
    time = summary.time
    if time is not None and len(time.by_hour) > 1:
        out.append(_table(f"By hour of day (every configuration pooled; {pct} % CI by task)",
                          ("hour", *SLOT_HEADER[1:]), slot_rows(time.by_hour)))
    if time is not None and len(time.by_window) > 1:
        out.append(_table(f"By window (every configuration pooled; {pct} % CI by task)",
                          ("window", *SLOT_HEADER[1:]), slot_rows(time.by_window)))
        if time.window_tests:
            out.append(_table("Do the windows differ? Paired by task, ranks within task",
                              TEST_HEADER, test_rows(summary)))
    if len(summary.nodes) > 1 or any(n.flags for n in summary.nodes):
        out.append(_table("Host health per node (medians over its trials; stall = PSI some)",
                          NODE_HEADER, node_rows(summary)))
    return out


def _table(title: str, header: tuple[str, ...], rows: list[tuple[str, ...]]) -> Table:
    table = Table(title=title)
    for i, name in enumerate(header):
        table.add_column(name, justify="left" if i == 0 or name in ("windows", "flag") else "right")
    for row in rows:
        table.add_row(*row)
    return table
