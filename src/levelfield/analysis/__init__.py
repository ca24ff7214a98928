"""Trial table → scores with their noise bands (docs/design.md "Statistics").

Works on any pandas DataFrame with columns `task, agent, policy, repeat, status` (status in
passed | failed | infra_error) plus the optional telemetry columns, so results from any harness can
be analysed: `summarize(df)` gives every figure of a run, `compare(df, by="policy")` the paired
comparisons, `power_analysis(df, gap=0.02)` the sample size to see a gap, `leaderboard(df)` the
ranks of many configurations with their confidence sets and tiers.

Names load on first use: scipy and statsmodels take over a second to import, and `levelfield run`
(which imports `analysis.table`) should not pay for statistics it does not compute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from levelfield._lazy import lazy_exports

if TYPE_CHECKING:
    from levelfield.analysis.calibration import Calibration, CeilingCheck, calibrate
    from levelfield.analysis.decomposition import Decomposition
    from levelfield.analysis.estimators import Estimate, clustered_mean
    from levelfield.analysis.hidden import HiddenVariables, hidden_variables
    from levelfield.analysis.paired import Comparison, PairedComparison, compare
    from levelfield.analysis.power import PowerAnalysis, power_analysis
    from levelfield.analysis.sensitivity import TaskSensitivity, task_sensitivity
    from levelfield.analysis.standings import leaderboard
    from levelfield.analysis.summary import ConfigSummary, Metric, RunSummary, summarize

_HOME = {
    "Calibration": "calibration",
    "CeilingCheck": "calibration",
    "calibrate": "calibration",
    "Decomposition": "decomposition",
    "Estimate": "estimators",
    "clustered_mean": "estimators",
    "HiddenVariables": "hidden",
    "hidden_variables": "hidden",
    "leaderboard": "standings",
    "Comparison": "paired",
    "PairedComparison": "paired",
    "compare": "paired",
    "PowerAnalysis": "power",
    "power_analysis": "power",
    "TaskSensitivity": "sensitivity",
    "task_sensitivity": "sensitivity",
    "ConfigSummary": "summary",
    "Metric": "summary",
    "RunSummary": "summary",
    "summarize": "summary",
}
__all__ = [
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


__getattr__, __dir__ = lazy_exports(__name__, _HOME, globals())
