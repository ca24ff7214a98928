"""Imported submissions → what a reader of their scores should know first (`flag_submissions`).

A leaderboard ranks folders as its submitters uploaded them. Nothing checks that a folder holds
one agent with one model, the same number of attempts on every task, each trial once, attempts
that are runs of their own rather than copies of one (copies.py), the dataset everyone else ran,
rewards that are numbers in [0, 1], or trials of its own rather than a copy of another
submission's. Each flag names what was found, with counts, and changes no trial: the score
still counts every trial in the folder, as the leaderboard does. "Most submissions" means more
than half of them: a value only tied for the lead is no one's usual.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from levelfield.harbor.copies import copied_attempts, task_outcomes, varying_tasks
from levelfield.harbor.trial_file import HarborTrial

UNRECORDED = frozenset({None, "", "unknown"})  # a version or model nobody wrote down


@dataclass(frozen=True, slots=True)
class Flag:
    kind: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def flag_submissions(
    trials: Mapping[str, Sequence[HarborTrial]],
    jobs: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[Flag]]:
    """Flags per submission label; a submission with none is absent. `jobs` names each trial's
    job folder (in `trials`' order). Comparisons with "the rest" (K, the task set, task
    versions) need at least three submissions, and a strict majority among them."""
    usual_k = _majority([_single_k(t) for t in trials.values()])
    usual_tasks = _majority([frozenset(t.task for t in ts) for ts in trials.values()])
    usual_checksums = _usual_checksums(trials.values())
    same_outcomes = _same_outcomes(trials)
    outcomes = {label: task_outcomes(own) for label, own in trials.items()}
    varying = [v[0] for o in outcomes.values() if (v := varying_tasks(o)) is not None]
    usual_varying = statistics.median(varying) if len(varying) >= 3 else None
    flags: dict[str, list[Flag]] = {}
    for label, own in trials.items():
        found = [
            *_mixed(own),
            *_repeats(own, usual_k if len(trials) >= 3 else None),
            *_duplicates(own),
            *_tasks(own, usual_tasks if len(trials) >= 3 else None, usual_checksums),
            *_partial_rewards(own),
            *_invalid_rewards(own),
            *_unreadable(own),
        ]
        own_jobs = (jobs or {}).get(label) or [""] * len(own)
        copied = copied_attempts(own, own_jobs, outcomes[label], usual_varying)
        if copied:
            found.append(Flag("copied_attempts", copied))
        if label in same_outcomes:
            found.append(Flag("duplicate_outcomes", same_outcomes[label]))
        if found:
            flags[label] = found
    return flags


def _mixed(trials: Sequence[HarborTrial]) -> Iterator[Flag]:
    for kind, field, what in (
        ("other_agents", "agent_name", "agents"),
        ("other_models", "model", "models"),
        ("agent_versions", "agent_version", "agent versions"),
    ):
        seen = Counter(t.facts[field] for t in trials)
        named = {k: n for k, n in seen.items() if k not in UNRECORDED}
        if len(named) > 1:
            listed = ", ".join(f"{k} ({n})" for k, n in sorted(named.items(), key=lambda x: -x[1]))
            yield Flag(kind, f"{len(named)} {what} in one submission: {listed}")


def _k_per_task(trials: Sequence[HarborTrial]) -> Counter[str]:
    return Counter(t.task for t in trials)


def _single_k(trials: Sequence[HarborTrial]) -> int | None:
    ks = set(_k_per_task(trials).values())
    return ks.pop() if len(ks) == 1 else None


def _repeats(trials: Sequence[HarborTrial], usual_k: tuple[int, int, int] | None) -> Iterator[Flag]:
    per_task = _k_per_task(trials)
    ks = Counter(per_task.values())
    if len(ks) > 1:
        spread = ", ".join(f"{n} tasks with K = {k}" for k, n in sorted(ks.items()))
        yield Flag("uneven_k", f"attempts per task differ: {spread}")
    elif usual_k is not None and (k := next(iter(ks))) != usual_k[0]:
        value, held, total = usual_k
        yield Flag(
            "unusual_k",
            f"K = {k} trials per task where most submissions ({held} of {total}) have {value}",
        )


def _duplicates(trials: Sequence[HarborTrial]) -> Iterator[Flag]:
    for field, what in (("trial_id", "trial ids"), ("trial_name", "trial names")):
        seen = Counter(t.facts[field] for t in trials)
        extra = sum(n - 1 for key, n in seen.items() if key is not None and n > 1)
        if extra:
            yield Flag(
                "duplicate_trials",
                f"{extra} trials repeat another's {what[:-1]} ({what} found more than once: "
                f"{sum(1 for k, n in seen.items() if k is not None and n > 1)})",
            )


def _tasks(
    trials: Sequence[HarborTrial],
    usual_set: tuple[frozenset[str], int, int] | None,
    usual_checksums: Mapping[str, str],
) -> Iterator[Flag]:
    own = {t.task for t in trials}
    if usual_set is not None and own != usual_set[0]:
        usual = usual_set[0]
        missing, extra = sorted(usual - own), sorted(own - usual)
        yield Flag(
            "task_set",
            f"its task set differs from most submissions' ({usual_set[1]} of {usual_set[2]}): "
            f"{len(missing)} missing "
            f"{_few(missing)}, {len(extra)} extra {_few(extra)} (another dataset version?)",
        )
    changed = {
        t.task
        for t in trials
        if t.task in usual_checksums
        and t.facts["task_checksum"] not in (None, usual_checksums[t.task])
    }
    if changed:
        yield Flag(
            "task_versions",
            f"{len(changed)} of {len(own)} tasks carry another checksum than most submissions' "
            f"{_few(sorted(changed))}: another version of those tasks, or a Harbor that "
            "checksums differently",
        )


def _usual_checksums(groups: Iterable[Sequence[HarborTrial]]) -> dict[str, str]:
    """Per task, the checksum a strict majority of (at least three) submissions ran."""
    per_task: dict[str, Counter[str]] = defaultdict(Counter)
    for trials in groups:
        for task, checksum in {(t.task, t.facts["task_checksum"]) for t in trials}:
            if checksum:
                per_task[task][checksum] += 1
    usual = {}
    for task, counts in per_task.items():
        checksum, n = counts.most_common(1)[0]
        if counts.total() >= 3 and 2 * n > counts.total():
            usual[task] = checksum
    return usual


def _same_outcomes(trials: Mapping[str, Sequence[HarborTrial]]) -> dict[str, str]:
    """Submissions whose every task has the same multiset of (reward, exception type): trial by
    trial the same outcomes. Different runs never match on 89 tasks (on the 55 shared
    submissions the closest pair agrees on 75), a copy always does."""
    by_fingerprint: dict[frozenset[Any], list[str]] = defaultdict(list)
    for label, own in trials.items():
        per_task: dict[str, list[tuple[str, str]]] = defaultdict(list)
        for t in own:
            per_task[t.task].append((repr(t.reward), t.exception_type or ""))
        fingerprint = frozenset((task, tuple(sorted(v))) for task, v in per_task.items())
        by_fingerprint[fingerprint].append(label)
    same = {}
    for labels in by_fingerprint.values():
        for label in labels if len(labels) > 1 else ():
            others = ", ".join(o for o in labels if o != label)
            same[label] = f"every trial's outcome duplicates another submission's: {others}"
    return same


def _partial_rewards(trials: Sequence[HarborTrial]) -> Iterator[Flag]:
    """Only valid rewards reach here: one that is not a number in [0, 1] is None."""
    partial = sum(1 for t in trials if t.reward is not None and 0.0 < t.reward < 1.0)
    if partial:
        yield Flag(
            "partial_rewards",
            f"{partial} trials have a reward between 0 and 1; levelfield counts a pass at 1, "
            "the leaderboard averages the reward",
        )


def _invalid_rewards(trials: Sequence[HarborTrial]) -> Iterator[Flag]:
    problems = Counter(t.reward_problem for t in trials if t.reward_problem)
    if problems:
        shown = "; ".join(f"{n} × {p}" for p, n in problems.most_common(3))
        more = f"; and {len(problems) - 3} other kinds" if len(problems) > 3 else ""
        yield Flag(
            "invalid_rewards",
            f"{problems.total()} trials have a reward that is not a number in [0, 1]; each "
            f"counts as the grader's failure (verifier_error), never a pass: {shown}{more}",
        )


def _unreadable(trials: Sequence[HarborTrial]) -> Iterator[Flag]:
    """Trials that ran but whose result.json cannot be read, each named: they count 0."""
    names = sorted(t.facts["trial_name"] for t in trials if t.unreadable is not None)
    if names:
        yield Flag(
            "unreadable_trials",
            f"{len(names)} trials ran but their result.json cannot be read; each counts as a "
            f"trial without a reward (0 in the score, harness_error): {', '.join(names)}",
        )


def _majority(values: Sequence[Any]) -> tuple[Any, int, int] | None:
    """(the value more than half of `values` hold, how many, of how many); None values count
    in the total but are nobody's usual."""
    counts = Counter(v for v in values if v is not None)
    if not counts:
        return None
    value, held = counts.most_common(1)[0]
    return (value, held, len(values)) if 2 * held > len(values) else None


def _few(names: Sequence[str], shown: int = 3) -> str:
    if not names:
        return ""
    more = f", +{len(names) - shown}" if len(names) > shown else ""
    return "(" + ", ".join(names[:shown]) + more + ")"
