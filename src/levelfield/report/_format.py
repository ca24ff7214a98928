"""Numbers → the strings every report shows, so terminal, Markdown and HTML say the same thing.

Rates print as percentage points with one decimal ("52.3"): a 2-point leaderboard gap must be
visible, a third decimal would be noise. Undefined values print as "n/a", never as 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from levelfield.records import DEFAULT_WINDOW

if TYPE_CHECKING:  # annotations only: the leaderboard's report need not import the run's
    from levelfield.analysis.calibration import Calibration
    from levelfield.analysis.decomposition import Decomposition
    from levelfield.analysis.estimators import Estimate
    from levelfield.analysis.paired import PairedComparison
    from levelfield.analysis.summary import ConfigSummary, Metric

MINUS = "−"  # U+2212: a sign, not a hyphen, lines up in tables


def pts(x: float, signed: bool = False) -> str:
    """0.523 → "52.3" (signed: "+52.3"); NaN → "n/a"; never "−0.0"."""
    if x is None or math.isnan(x):
        return "n/a"
    text = f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}"
    if float(text) == 0:
        text = "+0.0" if signed else "0.0"
    return text.replace("-", MINUS)


def interval(ci: tuple[float, float], signed: bool = False) -> str:
    return f"[{pts(ci[0], signed)}, {pts(ci[1], signed)}]"


def metric(m: Metric) -> str:
    """Mean with its analytic task-clustered CI: "52.3 [48.1, 56.5]"."""
    return estimate(m.estimate)


def estimate(e: Estimate) -> str:
    return f"{pts(e.mean)} {interval(e.ci)}"


def p_value(p: float) -> str:
    if p is None or math.isnan(p):
        return "n/a"
    return "< 0.001" if p < 0.001 else f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def p_is(name: str, p: float) -> str:
    """Name and p-value: p = 0.15, or p < 0.001 (not "p = < 0.001")."""
    text = p_value(p)
    return f"{name} {text}" if text.startswith("<") else f"{name} = {text}"


def ceiling(multiple: float) -> str:
    """Memory ceiling as a multiple of the spec: 3.0 → "3x", inf → "none", NaN → "unknown"."""
    if math.isnan(multiple):
        return "unknown"
    return "none" if math.isinf(multiple) else f"{multiple:g}x"


def label(config: ConfigSummary, skip: tuple[str, ...] = ()) -> str:
    """Configuration as agent / policy, plus the window unless it is the default one, and the run
    when runs are stacked."""
    return " / ".join(
        v
        for k, v in config.labels.items()
        if k not in skip and not (k == "window" and v == DEFAULT_WINDOW)
    )


def within(pairs: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{k} {v}" for k, v in pairs if not (k == "window" and v == DEFAULT_WINDOW))


def log_odds(coef: float, ci: tuple[float, float]) -> str:
    return f"{coef:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]".replace("-", MINUS)


def verdict(pair: PairedComparison, alpha: float, family: int) -> str:
    """One line a reader can quote: "headroom − strict = +2.1 pts [−0.8, +5.0], p = 0.15: not
    distinguishable". With several pairs in the sweep the Holm-adjusted p decides."""
    e = pair.estimate
    p = pair.p_holm if family > 1 else pair.p_value
    shown = p_is("p", pair.p_value)
    if family > 1:
        shown += ", " + p_is("Holm p", pair.p_holm)
    decided = "distinguishable" if p < alpha else "not distinguishable"
    if math.isnan(p):
        decided = "not testable"
    return (
        f"{pair.a} {MINUS} {pair.b} = {pts(e.diff, signed=True)} pts "
        f"{interval(e.ci, signed=True)}, {shown}: {decided}"
    )


def unmatched(pair: PairedComparison) -> str:
    """Tasks left out of the pairing, named (first few) so nothing is silently dropped."""
    parts = []
    for side, tasks in ((pair.a, pair.only_a), (pair.b, pair.only_b)):
        if tasks:
            names = ", ".join(tasks[:5]) + (", …" if len(tasks) > 5 else "")
            parts.append(f"{len(tasks)} task(s) only under {side}: {names}")
    return "; ".join(parts)


def info_value(info: Mapping[str, Any], *path: str) -> str:
    """info["a"]["b"] as text, or "unknown" when any key is missing or empty."""
    value: Any = info
    for key in path:
        if not isinstance(value, Mapping) or value.get(key) in (None, ""):
            return "unknown"
        value = value[key]
    return str(value)


def gib(n_bytes: Any) -> str:
    try:
        return f"{float(n_bytes) / 2**30:.1f} GiB"
    except (TypeError, ValueError):
        return "unknown"


def advice(calibration: Calibration) -> str:
    """The calibration's recommendation in words, including what "no equivalent ceiling" means."""
    if calibration.verdict == "equivalent":
        return (
            f"recommended ceiling: {calibration.recommended} (the largest equivalent to "
            f"{calibration.reference} within ±{pts(calibration.margin)} pts)"
        )
    if calibration.verdict == "different":
        return (
            f"no larger ceiling is equivalent to {calibration.reference}: the ceiling changes the "
            "score, so state it with every score"
        )
    return f"inconclusive: keep {calibration.reference} until more tasks or repeats decide"


def strategy_note(d: Decomposition) -> str:
    """Why some kills count as capability here: the cross-policy evidence, in one clause."""
    if not d.strategy_kills:
        return ""
    names = ", ".join(d.strategy_tasks[:4]) + (", …" if len(d.strategy_tasks) > 4 else "")
    return (
        f"capability unlock includes {d.strategy_kills} OOM kill(s) at {d.before} read as the "
        f"agent's heavier path ({names}): killed at {d.before} and every tighter ceiling, and "
        f"still above {d.before}'s ceiling under {d.after}"
    )
