"""A Harbor trial's stored exception and reward → its verdict, by the one verdict function.

Harbor keeps an exception's class name and message but no kernel evidence. What each type means
(whose failure it is, and why) is one table beside levelfield's own outcome table
(`outcome._imported.RULES`); this module only hands a trial's facts to `outcome.decide`, as the
native runner and the hosted sandbox do with theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from levelfield.outcome import IMPORTED_NOTE, RULES, Imported, PhaseLog, decide, outcome_of
from levelfield.records import Evidence, Outcome, Reason

__all__ = ["IMPORTED_NOTE", "RULES", "UNREADABLE", "Verdict", "judge", "unreadable_verdict"]


@dataclass(frozen=True, slots=True)
class Verdict:
    reason: Reason
    notes: tuple[str, ...]

    @property
    def outcome(self) -> Outcome:
        return outcome_of(self.reason)


def judge(
    exception_type: str | None,
    message: str | None,
    reward: float | None,
    reward_problem: str | None = None,
    *,
    evidence: Evidence | None = None,
) -> Verdict:
    """The trial's reason, and the evidence notes that say how it was reached. `evidence`: what
    levelfield's own sandbox recorded beside a trial it ran (kernel counters first)."""
    plain = evidence is None and exception_type is None and reward_problem is None
    if plain and reward in _GRADED:
        return _GRADED[reward]
    imported = Imported(exception_type, message, reward_problem)
    tampered = evidence.tampered if evidence is not None else ()
    log = PhaseLog(reward=reward, imported=imported, evidence=evidence, tampered=tampered)
    decided = decide(log)
    return Verdict(decided.reason, decided.notes)


def unreadable_verdict(why: str) -> Verdict:
    """A trial that ran but whose result.json cannot be read (truncated, invalid): Harbor's own
    record of it is broken, so it is the harness's failure, an infra error. The score counts it
    as a trial without a reward (0, the leaderboard's convention), the clean score leaves it out."""
    return Verdict(
        Reason.HARNESS_ERROR,
        (
            f"{UNREADABLE}: {why}: the trial ran (its folder is a trial's) but its result "
            "cannot be read, so it has no reward: 0 in the score, an infra error "
            "(harness_error) in the clean score",
        ),
    )


UNREADABLE = "unreadable result.json"

# Trials with no exception and a usable reward of 0 or 1 (or none): most of a leaderboard,
# decided once rather than per trial.
_GRADED: Final = {
    reward: Verdict(decide(PhaseLog(reward=reward, imported=Imported())).reason, (IMPORTED_NOTE,))
    for reward in (0.0, 1.0, None)
}
