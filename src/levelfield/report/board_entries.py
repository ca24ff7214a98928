"""A leaderboard's entries as their maintainers check them (analysis/board_entries.py): agent and
model, when each ran, its outcome profile, and the entries sharing a model or an agent."""

from __future__ import annotations

from levelfield.analysis.standings import Entry, Leaderboard
from levelfield.report import _format as f

SHOWN_GROUPS = 6  # per kind, in a sentence
ENTRIES_HEADER = (
    "entry", "agent", "model", "trials from", "to", "passes", "failures", "timeouts", "errors",
    "profile",
)  # fmt: skip
ENTRIES_TITLE = (
    "Entries: who, when, and how their trials ended (shares of trials, points; profile: "
    "distance of the failure mix from the board's, ! = far)"
)


def profile_sentences(board: Leaderboard) -> list[str]:
    far = [e for e in board.entries if e.profile_far]
    lines = []
    if far:
        shown = "; ".join(f"{e.label} ({_profile(e)}: {e.profile_why})" for e in far)
        lines.append(
            f"Outcome profiles unlike the board's ({len(far)} of {len(board.entries)} entries; "
            f"the way their trials fail, not how often): {shown}."
        )
    for by, what in (("model", "the same model across harnesses"),
                     ("agent", "the same harness across models")):  # fmt: skip
        found = [g for g in board.groups if g.by == by]
        if found:
            shown = "; ".join(
                f"{g.name}: {len(g.entries)} entries, {f.pts(g.low)} to {f.pts(g.high)} "
                f"(best {g.best})"
                for g in found[:SHOWN_GROUPS]
            )
            more = f" and {len(found) - SHOWN_GROUPS} more" if len(found) > SHOWN_GROUPS else ""
            lines.append(f"By {by} ({what}): {shown}{more}.")
    return lines


def entry_rows(board: Leaderboard) -> list[tuple[str, ...]]:
    return [
        (
            e.label,
            e.agent,
            e.model,
            _day(e.first_trial_at),
            _day(e.last_trial_at),
            *(f.pts(e.profile.get(kind, float("nan"))) for kind in PROFILE_KINDS),
            f.pts(e.profile_distance) + (" !" if e.profile_far else ""),
        )
        for e in board.entries
    ]


PROFILE_KINDS = ("passed", "failed", "timeout", "error")


def _profile(e: Entry) -> str:
    return ", ".join(
        f"{name} {f.pts(e.profile.get(kind, float('nan')))}"
        for name, kind in zip(SHORT, PROFILE_KINDS, strict=True)
    )


SHORT = ("passes", "failures", "timeouts", "errors")


def _day(stamp: str | None) -> str:
    return stamp[:10] if stamp else ""
