"""Trial table of a leaderboard → who each entry is and how its trials ended: signals for the
board's maintainers, beside the score.

**Agent and model.** A Terminal-Bench submission is named `Agent__Model`; the label is split on
its first `__`. A label without one takes the agent name and model its trials' own files give
(Harbor's `agent_info`), the most common of each. Entries are grouped by model (the same model
across harnesses) and by agent (the same harness across models), names compared without case.

**When it ran.** The first and last start time of the entry's trials.

**Outcome profile.** Each entry's trials as shares of four kinds: passes, ordinary failures (the
tests ran and failed), agent timeouts, and errors (every other ending, infra errors included).
Two entries with the same score can have very different profiles; one whose way of failing is
unlike the board's is worth a look (a harness that turns failures into timeouts, or files that
lost their test results). **Far from the board** is measured on the failure mix, the shares of
the three ways of not passing among the trials that did not pass, so that the score itself does
not count: the total variation distance of the entry's mix from the board's (the mean of the
entries' mixes), flagged above Tukey's upper fence of those distances (Q3 + 1.5·IQR); and a way
of failing that the board's entries commonly show (a median share of at least RARE_KIND of their
non-passes) and the entry all but never does (under a tenth of that median, over at least
MIN_FAILURES non-passes): an entry with no agent timeout in 445 trials, or one ordinary test
failure, where its peers have dozens.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pandas as pd

KINDS = ("passed", "failed", "timeout", "error")
FAILURE_KINDS = KINDS[1:]
LABEL_SPLIT = "__"
RARE_KIND = 0.10
MIN_FAILURES = 20
NAMES = {"failed": "ordinary failures", "timeout": "timeouts", "error": "errors"}


@dataclass(frozen=True, slots=True)
class EntryFacts:
    """`profile`: each kind's share of the entry's trials; `distance`: its failure mix's total
    variation distance from the board's; `far`: above the board's upper fence, or a common way of
    failing all but absent (`why` says which)."""

    agent: str
    model: str
    first_trial_at: str | None
    last_trial_at: str | None
    profile: dict[str, float]
    distance: float
    far: bool
    why: str = ""


@dataclass(frozen=True, slots=True)
class Group:
    """Entries that share a model (or an agent): the best of them and the spread of scores."""

    by: str
    name: str
    entries: tuple[str, ...]
    best: str
    low: float
    high: float


def entry_facts(trials: pd.DataFrame, entries: pd.Series) -> dict[str, EntryFacts]:
    """Per entry (`entries` names each trial's), in the order of first appearance."""
    frame = pd.DataFrame(
        {
            "entry": entries.astype(str).to_numpy(),
            "kind": _kinds(trials),
            "started": _column(trials, "started_at"),
            "agent": _column(trials, "harbor_agent"),
            "model": _column(trials, "harbor_model"),
        }
    )
    counts = pd.crosstab(frame["entry"], frame["kind"]).reindex(columns=KINDS, fill_value=0)
    profiles = counts.div(counts.sum(axis=1), axis=0)
    failures = counts[list(FAILURE_KINDS)]
    mixes = failures.div(failures.sum(axis=1).replace(0, np.nan), axis=0)
    board = mixes.mean(axis=0, skipna=True)
    distance = 0.5 * (mixes - board).abs().sum(axis=1, min_count=1)
    fence = _upper_fence(distance.dropna().to_numpy())
    medians = mixes.median(axis=0, skipna=True)
    out = {}
    for label, group in frame.groupby("entry", sort=False):
        agent, model = _agent_and_model(str(label), group)
        started = sorted(s for s in group["started"] if s)
        d = float(distance.get(label, np.nan))
        why = _why_far(d, fence, mixes.loc[label], medians, int(failures.loc[label].sum()))
        out[str(label)] = EntryFacts(
            agent,
            model,
            started[0] if started else None,
            started[-1] if started else None,
            {k: float(profiles.loc[label, k]) for k in KINDS},
            d,
            bool(why),
            why,
        )
    return out


def groups(facts: dict[str, EntryFacts], scores: dict[str, float]) -> tuple[Group, ...]:
    """Models and agents shared by two entries or more, most entries first."""
    out = []
    for by in ("model", "agent"):
        members: dict[str, list[str]] = {}
        names: dict[str, str] = {}
        for label, fact in facts.items():
            name = getattr(fact, by)
            if name == "unknown":
                continue
            members.setdefault(name.casefold(), []).append(label)
            names.setdefault(name.casefold(), name)
        for key, labels in members.items():
            if len(labels) < 2:
                continue
            ranked = sorted(labels, key=lambda e: (-scores[e], e))
            values = [scores[e] for e in ranked]
            out.append(Group(by, names[key], tuple(ranked), ranked[0], min(values), max(values)))
    return tuple(sorted(out, key=lambda g: (g.by, -len(g.entries), g.name.casefold())))


def _kinds(trials: pd.DataFrame) -> np.ndarray:
    status = trials["status"].astype(str).to_numpy()
    reason = trials["reason"].astype(str).to_numpy()
    return np.select(
        [status == "passed", reason == "tests_failed", reason == "agent_timeout"],
        ["passed", "failed", "timeout"],
        "error",
    )


def _column(trials: pd.DataFrame, name: str) -> np.ndarray:
    if name not in trials.columns:
        return np.full(len(trials), None, dtype=object)
    return trials[name].astype(object).where(trials[name].notna(), None).to_numpy()


def _agent_and_model(label: str, group: pd.DataFrame) -> tuple[str, str]:
    agent, split, model = label.partition(LABEL_SPLIT)
    if split and agent and model:
        return agent, model
    return _most_common(group["agent"], label), _most_common(group["model"], "unknown")


def _most_common(values: pd.Series, default: str) -> str:
    found = Counter(str(v) for v in values if v)
    return found.most_common(1)[0][0] if found else default


def _why_far(
    distance: float, fence: float, mix: pd.Series, medians: pd.Series, n_failures: int
) -> str:
    reasons = []
    if distance > fence:
        reasons.append(f"its failure mix is {100 * distance:.1f} points from the board's")
    if n_failures >= MIN_FAILURES:
        for kind in FAILURE_KINDS:
            usual = float(medians[kind])
            if usual >= RARE_KIND and float(mix[kind]) < usual / 10:
                reasons.append(
                    f"{NAMES[kind]} {100 * float(mix[kind]):.1f} % of its {n_failures} non-passes, "
                    f"the board's median {100 * usual:.1f} %"
                )
    return "; ".join(reasons)


def _upper_fence(values: np.ndarray) -> float:
    if values.size < 4:
        return float("inf")  # too few entries to tell what is usual
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 + 1.5 * (q3 - q1))
