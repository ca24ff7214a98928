"""Whose failure a model call's end is: one rule for every path (`classify` reads it)."""

from __future__ import annotations

import re
from typing import Final

from levelfield.records import ApiCall

# Whose doing a failed model call is: one rule for every path (the terminal agent's own client,
# the proxy's record of a CLI's calls, what a CLI says of its last call). The API's: a refused
# key (401, 403), rate limits and overload that the retries did not get past, a server error, no
# answer at all or an answer broken off. The agent's: any other 4xx (a malformed request, a
# context too long) and a call it cut short itself (its own deadline, its own exit). So are the
# attempts the proxy refused (a path it does not carry, a call past the trial's model budget),
# whatever status their answer had: they never reached the API.
API_STOP_OUTCOMES: Final = frozenset(
    {"rate_limited", "overloaded", "server_error", "connection_error"}
)
AGENTS_OWN_OUTCOMES: Final = frozenset({"cut_short", "refused", "budget_exhausted"})
AUTH_STATUSES: Final = frozenset({401, 403})


def outcome_for_status(status: int | None, text: str = "") -> str:
    """The word an answer's HTTP status gets (`ApiCall.outcome`); None means no answer came.
    `text` is the answer's body: a 5xx that says it is overloaded is an overload."""
    if status is None:
        return "connection_error"
    if 200 <= status < 300:
        return "ok"
    if status == 429:
        return "rate_limited"
    if status == 529 or (status >= 500 and "overloaded" in text.lower()):
        return "overloaded"
    return "server_error" if status >= 500 else "client_error"


def is_api_failure(status: int | None, outcome: str) -> bool:
    """The one rule: is a call that ended this way the API's failure rather than the agent's?"""
    if outcome in AGENTS_OWN_OUTCOMES:
        return False
    return outcome in API_STOP_OUTCOMES or (outcome != "ok" and status in AUTH_STATUSES)


def stopping_call(calls: tuple[ApiCall, ...] | list[ApiCall]) -> ApiCall | None:
    """The failed call that stopped the agent: its last call (attempts the proxy refused as not
    model calls aside: they reached no API), when no success came after it and the failure was
    the API's."""
    relayed = [c for c in calls if c.outcome != "refused"]
    last = relayed[-1] if relayed else None
    if last is None or not is_api_failure(last.status, last.outcome):
        return None
    return last


# A refused attempt past the first ones the proxy records stands for the run of refusals in a
# row it ended (`model_api._recording`); its error ends with this.
REFUSAL_RUN = "(the last of {n} refused attempts in a row)"
_REFUSAL_RUN = re.compile(r"\(the last of (\d+) refused attempts in a row\)$")


def refusals(calls: tuple[ApiCall, ...] | list[ApiCall], outcome: str) -> int:
    """How many attempts the proxy refused with this outcome (`refused`, `budget_exhausted`),
    counting the runs that one recorded entry stands for."""
    count = 0
    for call in calls:
        if call.outcome == outcome:
            run = _REFUSAL_RUN.search(call.error or "")
            count += int(run.group(1)) if run else 1
    return count


def budget_call(calls: tuple[ApiCall, ...] | list[ApiCall]) -> ApiCall | None:
    """The last call refused because the trial's model budget was spent, if any was."""
    return next((c for c in reversed(calls) if c.outcome == "budget_exhausted"), None)
