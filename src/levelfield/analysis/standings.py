"""Trial table of a leaderboard → is #1 really #1? Ranks with what the data can say about them.

A leaderboard is a run whose configurations are its entries (an imported submission is one
configuration: its agent label). Per entry: the score (the leaderboard's convention: mean over
tasks of the task's mean, an infra error counting as a failure) with its task-clustered CI,
beside the leaderboard's own "±"; the clean score and its rank; the infra error rate by kind;
how much of the clean score rests on exceptions the import's table does not know; the sandbox
provider. Between entries: the paired difference to the next entry and to #1 (CI, sign-flip p,
Holm over those comparisons together), the rank sets and tiers of ranks.py, and the smallest gap
the design can detect (power.py).

**Ranks are decided on exact scores.** A score is a mean of passes / K over tasks: a fraction,
computed here as one (`fractions.Fraction` of the pass counts), so that two entries with 349
passes of 445 share a rank, whichever order a float sum would have added their tasks in. The
clean rank likewise.

**The infra error rate** is, as in `levelfield report`, the mean over tasks of each task's share
of infra errors: weighted like the score, so that with uneven K a task with many trials does not
count more. Its kinds split it the same way and add up to it.

**Unclassified exceptions.** An imported trial whose exception no row of the import's table
knows is an infra error (only what the agent did is booked against it), so it leaves the clean
score. Per entry: the share of such trials, the clean score if they counted as the agent's
failures, and the clean rank it would then hold.

**The two bands answer two questions.** The leaderboard's ± is its `stderr`: the square root of
sum over tasks of p̂(1 − p̂)/(K − 1), over n (terminal-bench-experiments,
sql/get_agent_scores_and_costs.sql): the spread of the score if the same agent re-ran the same
89 tasks, retry noise alone. levelfield's CI treats the 89 tasks as a sample of the work the
benchmark stands for, so it adds the spread between tasks; a claim that one agent is better than
another at that work needs it. For two entries on the same tasks the task difficulty cancels in
the paired difference, but how an entry fares on each task (the task × entry part) does not, which
is why the paired CI of a gap is wider than the two ± bands suggest.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from levelfield.analysis import _tidy, board_entries, board_tasks
from levelfield.analysis.board_entries import EntryFacts, Group
from levelfield.analysis.board_tasks import Deciding, First, TaskRates
from levelfield.analysis.estimators import Estimate, clipped, mean_of_tasks
from levelfield.analysis.paired import PairedComparison, TaskMatrix, compare_pairs, holm
from levelfield.analysis.power import detectable_gap, paired_variances
from levelfield.analysis.ranks import RankSets, rank_sets, ranks_of

TOP = 20  # "how many adjacent gaps in the top 20 are distinguishable"
POWER = 0.8


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry, `rank` by score (ties share the best); `retry_se` is the leaderboard's ± (NaN
    when some task has one trial); `infra_error_rate` the mean over tasks of each task's share
    of infra errors, `infra_by_kind` that per infra reason. `unclassified_rate` is the part of
    the infra error rate that rests on unclassified exceptions; `clean_if_agents` and
    `clean_rank_if_agents` the clean score and rank if those counted as the agent's failures
    (NaN where no task has a clean trial)."""

    label: str
    rank: int
    score: Estimate
    retry_se: float
    clean_score: Estimate
    clean_rank: int
    infra_error_rate: float
    infra_by_kind: dict[str, float]
    unclassified_rate: float
    clean_if_agents: float
    clean_rank_if_agents: int
    n_tasks: int
    n_trials: int
    repeats: tuple[int, int]
    simultaneous: tuple[int, int]
    marginal: tuple[int, int]
    tier: int
    provider: str
    flags: tuple[dict[str, str], ...] = ()  # the import's flags on it (harbor/flags.py)
    # who it is, when it ran and how its trials ended (board_entries.py)
    agent: str = ""
    model: str = ""
    first_trial_at: str | None = None
    last_trial_at: str | None = None
    profile: dict[str, float] = field(default_factory=dict)
    profile_distance: float = math.nan
    profile_far: bool = False
    profile_why: str = ""


@dataclass(frozen=True, slots=True)
class Gap:
    """`pair.a` ranks above `pair.b`; `to` is "next" (adjacent) or "first" (against #1)."""

    to: str
    pair: PairedComparison


@dataclass(frozen=True, slots=True)
class Detectable:
    """The smallest gap the design (`repeats` × `n_tasks`) detects at two-sided `alpha` with
    `power`, from each adjacent pair's measured variances: the median over pairs and their
    range; with Bonferroni over the adjacent pairs; and the floor no number of repeats lowers."""

    gap: float
    gap_range: tuple[float, float]
    gap_all_adjacent: float
    floor: float
    repeats: int
    n_tasks: int
    alpha: float
    power: float
    n_pairs: int


@dataclass(frozen=True, slots=True)
class Provider:
    """Entries that ran on one sandbox provider: means over entries, not over trials."""

    name: str
    entries: tuple[str, ...]
    n_trials: int
    score: float
    infra_error_rate: float


@dataclass(frozen=True, slots=True)
class Leaderboard:
    info: dict[str, Any]
    level: float
    entries: tuple[Entry, ...]
    gaps: tuple[Gap, ...]
    ranks: RankSets
    n_tiers: int
    top: int
    top_gaps_told_apart: int
    detectable: Detectable
    providers: tuple[Provider, ...]
    providers_confounded: bool
    unpaired: tuple[str, ...]
    first: First  # #1 against #2 (board_tasks.py)
    tasks: tuple[TaskRates, ...]  # every task's solve rates, hardest first
    deciding: tuple[Deciding, ...]  # the tasks the top adjacent gaps rest on
    groups: tuple[Group, ...]  # entries sharing a model, or an agent
    # folders of the imported leaderboard from which no trial was read, each with why
    not_ranked: dict[str, str] = field(default_factory=dict)


def leaderboard(
    trials: pd.DataFrame,
    *,
    info: Mapping[str, Any] | None = None,
    level: float = 0.95,
) -> Leaderboard:
    """Every figure of the leaderboard command; see the module docstring. Deterministic: the
    same trials give the same leaderboard (nothing here draws at random)."""
    lean, rates, labels = _entry_rates(trials)
    if len(labels) < 2:
        raise ValueError("a leaderboard needs at least two configurations to rank")
    exact = _exact_means(rates, "n_passed", "n_trials")
    scores = TaskMatrix.of(rates, "entry", labels, "score")
    ranks = rank_sets(scores.values.T, labels, level=level, exact=[exact[e] for e in labels])
    order = sorted(range(len(labels)), key=lambda j: (-exact[labels[j]], labels[j]))
    gaps = _gaps(scores, order, level)
    entries = _entries(trials, lean, rates, labels, ranks, level)
    flags = dict(info or {}).get("import_flags") or {}
    facts = board_entries.entry_facts(trials, lean["entry"])
    sorted_entries = tuple(
        _with_facts(entries[j], tuple(flags.get(entries[j].label, ())), facts[entries[j].label])
        for j in order
    )
    alpha = 1 - level
    top_next = [g for g in gaps if g.to == "next"][: min(TOP, len(order)) - 1]
    providers = _providers(sorted_entries)
    ordered = [labels[j] for j in order]
    decided = board_tasks.deciding(scores, ordered)
    return Leaderboard(
        info=dict(info or {}),
        level=level,
        entries=sorted_entries,
        gaps=gaps,
        ranks=ranks,
        n_tiers=max(ranks.tier),
        top=min(TOP, len(order)),
        top_gaps_told_apart=sum(1 for g in top_next if g.pair.p_holm < alpha),
        detectable=_detectable(rates, ordered, alpha),
        providers=providers,
        providers_confounded=_confounded(sorted_entries),
        unpaired=_unpaired(scores),
        first=_first(gaps, alpha),
        tasks=board_tasks.task_rates(scores, decided),
        deciding=decided,
        groups=board_entries.groups(facts, {e.label: e.score.mean for e in sorted_entries}),
        not_ranked=dict(((info or {}).get("import_skipped") or {}).get("submissions") or {}),
    )


def _with_facts(entry: Entry, flags: tuple[dict[str, str], ...], facts: EntryFacts) -> Entry:
    return replace(
        entry,
        flags=flags,
        agent=facts.agent,
        model=facts.model,
        first_trial_at=facts.first_trial_at,
        last_trial_at=facts.last_trial_at,
        profile=facts.profile,
        profile_distance=facts.distance,
        profile_far=facts.far,
        profile_why=facts.why,
    )


def _entry_rates(trials: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The lean trial table and per-task rates, each with an `entry` column naming the
    configuration by the identity values that vary (an imported leaderboard: its submission).
    The rates carry `n_unclassified`, the trials that are infra errors only because their
    exception is unclassified (0 where the table has no such column)."""
    lean = _tidy.check_trials(trials)
    counts = _tidy.task_counts(lean)
    keys = [c for c in _tidy.identity_columns(counts) if counts[c].nunique() > 1] or ["agent"]
    lean = lean.assign(entry=_label(lean, keys))
    counts = counts.assign(entry=_label(counts, keys))
    rates = _tidy.task_rates(counts).merge(
        _unclassified_counts(trials, lean), on=["entry", "task"], how="left"
    )
    rates["n_unclassified"] = rates["n_unclassified"].fillna(0).astype(int)
    return lean, rates, sorted(set(rates["entry"]))


def _unclassified_counts(trials: pd.DataFrame, lean: pd.DataFrame) -> pd.DataFrame:
    flagged = (
        trials["unclassified"].fillna(False).astype(bool).to_numpy()
        if "unclassified" in trials.columns
        else np.zeros(len(lean), bool)
    )
    frame = pd.DataFrame(
        {
            "entry": lean["entry"].astype(str).to_numpy(),
            "task": lean["task"].astype(str).to_numpy(),
            "n_unclassified": flagged & lean["infra"].to_numpy(),
        }
    )
    return frame.groupby(["entry", "task"], sort=False).sum().reset_index()


def _exact_means(
    rates: pd.DataFrame, numerator: str, denominator: str | pd.Series
) -> dict[str, Fraction]:
    """Per entry, the mean over its tasks of numerator / denominator as an exact fraction;
    tasks whose denominator is 0 are left out, and an entry with none left gets -1 (below any
    score, so it ranks last)."""
    below = rates[denominator] if isinstance(denominator, str) else denominator
    frame = pd.DataFrame(
        {"entry": rates["entry"], "a": rates[numerator].astype(int), "b": below.astype(int)}
    )
    out = {}
    for entry, group in frame[frame["b"] > 0].groupby("entry", sort=False):
        parts = [Fraction(a, b) for a, b in zip(group["a"], group["b"], strict=True)]
        out[str(entry)] = sum(parts, Fraction(0)) / len(parts)
    return {str(e): out.get(str(e), Fraction(-1)) for e in rates["entry"].unique()}


def _label(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    labels = [frame[k].astype(str) for k in keys]
    return functools.reduce(lambda a, b: a + " / " + b, labels)


def _entries(
    trials: pd.DataFrame,
    lean: pd.DataFrame,
    rates: pd.DataFrame,
    labels: list[str],
    ranks: RankSets,
    level: float,
) -> list[Entry]:
    clean = {e: mean_of_tasks(g["clean"].to_numpy(), level) for e, g in rates.groupby("entry")}
    clean_n = rates["n_trials"] - rates["n_infra"]
    exact_clean = _exact_means(rates, "n_passed", clean_n)
    if_agents = _exact_means(rates, "n_passed", clean_n + rates["n_unclassified"])
    clean_rank = dict(zip(labels, ranks_of([exact_clean[e] for e in labels]), strict=True))
    rank_if_agents = dict(zip(labels, ranks_of([if_agents[e] for e in labels]), strict=True))
    kinds, providers = _per_entry_facts(trials, lean)
    out = []
    for j, label in enumerate(labels):
        group = rates[rates["entry"] == label]
        n = int(group["n_trials"].sum())
        per_task = group["n_trials"].to_numpy(float)
        out.append(
            Entry(
                label=label,
                rank=ranks.rank[j],
                score=clipped(mean_of_tasks(group["score"].to_numpy(), level, n)),
                retry_se=retry_se(group["score"].to_numpy(), group["n_trials"].to_numpy()),
                clean_score=clipped(clean[label]),
                clean_rank=clean_rank[label],
                infra_error_rate=float(group["infra_rate"].mean()),
                infra_by_kind=kinds.get(label, {}),
                unclassified_rate=float(np.mean(group["n_unclassified"].to_numpy() / per_task)),
                clean_if_agents=float(if_agents[label]) if if_agents[label] >= 0 else math.nan,
                clean_rank_if_agents=rank_if_agents[label],
                n_tasks=len(group),
                n_trials=n,
                repeats=(int(group["n_trials"].min()), int(group["n_trials"].max())),
                simultaneous=ranks.simultaneous[j],
                marginal=ranks.marginal[j],
                tier=ranks.tier[j],
                provider=providers.get(label, "unknown"),
            )
        )
    return out


def retry_se(per_task: np.ndarray, repeats: np.ndarray) -> float:
    """The leaderboard's ±: sqrt(sum p̂(1 − p̂)/(K − 1)) / n, the SE of the mean over these
    tasks from retry noise alone; NaN when a task has a single trial (its noise is unseen)."""
    k = np.asarray(repeats, float)
    if k.size == 0 or (k < 2).any():
        return math.nan
    p = np.asarray(per_task, float)
    return float(math.sqrt(np.sum(p * (1 - p) / (k - 1))) / k.size)


def _per_entry_facts(
    trials: pd.DataFrame, lean: pd.DataFrame
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Infra error rate by reason (the mean over tasks of each task's share, as the rate
    itself), and the sandbox provider(s), per entry."""
    frame = pd.DataFrame(
        {
            "entry": lean["entry"].astype(str).to_numpy(),
            "task": lean["task"].astype(str).to_numpy(),
            "infra": lean["infra"].to_numpy(),
        }
    )
    kinds: dict[str, dict[str, float]] = {}
    if "reason" in trials.columns:
        frame["reason"] = trials["reason"].astype(str).to_numpy()
        per_task = frame.groupby(["entry", "task"]).size()
        n_tasks = per_task.groupby(level="entry").size()
        infra = frame[frame["infra"]].groupby(["entry", "task", "reason"]).size()
        share = infra / per_task.reindex(infra.index.droplevel("reason")).to_numpy()
        by_kind = share.groupby(level=["entry", "reason"]).sum()
        for (label, kind), total in by_kind.items():
            kinds.setdefault(str(label), {})[str(kind)] = float(total / n_tasks[label])
    providers: dict[str, str] = {}
    if "sandbox_provider" in trials.columns:
        frame["provider"] = trials["sandbox_provider"].fillna("unknown").astype(str).to_numpy()
        for label, group in frame.groupby("entry")["provider"]:
            providers[str(label)] = ", ".join(sorted(set(group)))
    return kinds, providers


def _gaps(scores: TaskMatrix, order: list[int], level: float) -> tuple[Gap, ...]:
    """Each entry against the next one down and against #1, Holm-adjusted as one family (the
    pair #1–#2 is in both lists and counted once)."""
    to_next = list(itertools.pairwise(order))
    to_first = [(order[0], below) for below in order[1:]]
    unique = list(dict.fromkeys(to_next + to_first))
    compared = compare_pairs(scores, unique, (), level)
    adjusted = holm([pair.p_value for pair in compared])
    done = {
        key: replace(pair, p_holm=float(q))
        for key, pair, q in zip(unique, compared, adjusted, strict=True)
    }
    return tuple(
        [Gap("next", done[key]) for key in to_next] + [Gap("first", done[key]) for key in to_first]
    )


def _first(gaps: tuple[Gap, ...], alpha: float) -> First:
    """#1 against #2, from the gap the family already holds (its Holm p is the board's)."""
    top = next(g for g in gaps if g.to == "next").pair
    family = len({(g.pair.a, g.pair.b) for g in gaps})
    e = top.estimate
    return board_tasks.first_against_second(
        top.a, top.b, e.diff, e.se, e.ci, top.p_holm, family, alpha
    )


def _detectable(rates: pd.DataFrame, ordered: list[str], alpha: float) -> Detectable:
    """Per adjacent pair, the smallest gap at the leaderboard's design (the most common K and
    the number of tasks an entry runs), from that pair's own variances."""
    sides = {e: g.set_index("task") for e, g in rates.groupby("entry")}
    repeats = int(rates["n_trials"].mode().iloc[0])
    n_tasks = int(rates.groupby("entry").size().mode().iloc[0])
    gaps, floors, corrected = [], [], []
    alpha_all = alpha / max(1, len(ordered) - 1)
    for a, b in itertools.pairwise(ordered):
        common = sides[a].index.intersection(sides[b].index)
        if len(common) < 2:
            continue
        columns = [
            sides[s].loc[common, c].to_numpy(float)
            for s in (a, b)
            for c in ("n_passed", "n_trials")
        ]
        var_diff, within = paired_variances(*columns)
        gaps.append(detectable_gap(var_diff, within, repeats, n_tasks, alpha, POWER))
        corrected.append(detectable_gap(var_diff, within, repeats, n_tasks, alpha_all, POWER))
        floors.append(detectable_gap(var_diff, within, math.inf, n_tasks, alpha, POWER))
    values = np.array(gaps) if gaps else np.array([math.nan])
    return Detectable(
        gap=_finite(np.median, gaps),
        gap_range=(_finite(np.min, gaps), _finite(np.max, gaps)),
        gap_all_adjacent=_finite(np.median, corrected),
        floor=_finite(np.median, floors),
        repeats=repeats,
        n_tasks=n_tasks,
        alpha=alpha,
        power=POWER,
        n_pairs=int(np.sum(np.isfinite(values))),
    )


def _finite(statistic: Any, values: list[float]) -> float:
    """The statistic of the finite values; NaN when there is none (every adjacent pair next
    to an entry with one trial per task, whose repeat noise is unseen)."""
    finite = np.asarray(values, float)
    finite = finite[np.isfinite(finite)]
    return float(statistic(finite)) if finite.size else math.nan


def _providers(entries: tuple[Entry, ...]) -> tuple[Provider, ...]:
    by_name: dict[str, list[Entry]] = {}
    for entry in entries:
        by_name.setdefault(entry.provider, []).append(entry)
    return tuple(
        Provider(
            name,
            tuple(e.label for e in group),
            sum(e.n_trials for e in group),
            float(np.mean([e.score.mean for e in group])),
            float(np.mean([e.infra_error_rate for e in group])),
        )
        for name, group in sorted(by_name.items(), key=lambda item: -len(item[1]))
    )


def _confounded(entries: tuple[Entry, ...]) -> bool:
    """Several providers, each entry on one: a provider's figures are then its entries'."""
    providers = {e.provider for e in entries}
    return len(providers) > 1 and not any(", " in p for p in providers)


def _unpaired(scores: TaskMatrix) -> tuple[str, ...]:
    """Tasks that not every entry ran, named: a task run by fewer than half the entries (another
    dataset version's name, say) with who ran it, and who skipped a task most entries ran.
    Their comparisons pair on fewer tasks."""
    ran = scores.trials > 0
    rare = ran.mean(axis=0) < 0.5
    out = []
    for t in np.flatnonzero(rare):
        who = [scores.labels[j] for j in np.flatnonzero(ran[:, t])]
        out.append(f"task {scores.tasks[t]} was run only by {', '.join(who)}")
    for j, label in enumerate(scores.labels):
        missing = [scores.tasks[t] for t in np.flatnonzero(~ran[j] & ~rare)]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            out.append(f"{label} did not run {', '.join(missing[:3])}{more}")
    return tuple(out)


