"""A trial's model budget, kept by whoever sees its calls: the recording proxy for an agent in the
sandbox, the `terminal` agent's own client. A ceiling on tokens (in + out, cached input
included) and one on dollars (tokens × the price table, `cost.py`), both per trial.

How "the call that would cross the ceiling" is judged: a call's tokens are known only once its
answer has said them, so the meter refuses a billed call once the calls that have ended have
reached a ceiling, and lets it go while they have not. The call that crosses a ceiling is thus
answered whole, and the trial's spend can end above its ceiling by what that call, and the calls
in flight beside it, cost: at most IN_FLIGHT calls are in flight at once under a budget (a
further one waits for one of them to end), so an agent cannot fan out a thousand calls before
the first is counted. Calls that bill nothing (a token count, the model list) always go. Every
billed call is counted, however it ended:
- an answer that reports no usage, or a stream the agent closed early and whose end was not read,
  is charged a token per byte of its request and of the answer seen (no text tokenizer gives more
  tokens than bytes); a stream the agent closes is read to its end upstream, so its usage counts;
- a streamed Chat Completions request is asked for its usage (`stream_options.include_usage`),
  which that API otherwise leaves out of a stream;
- under a cost ceiling each call is priced at the model it names (the request's `model`, Gemini's
  path; a dated snapshot at its model's price). A call to a model the table does not price is
  refused: its cost could not be counted. So is a request for the providers' server-side tools
  billed per use (web search, code execution...), whose fees are not in the tokens.

A refused call is answered in its provider's own shape for spent credit, which the clients read
as final (Anthropic's 400 `invalid_request_error`, OpenAI's 429 `insufficient_quota`, Gemini's
429 `RESOURCE_EXHAUSTED` with `limit: 0`), so a CLI stops instead of retrying, and the trial is
the agent's `budget_exhausted` when its tests did not pass (`outcome.classify`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from levelfield.model_api.cost import PriceTable
from levelfield.records import ModelBudget

IN_FLIGHT = 4  # billed calls of one trial in flight at once under a budget
# Server-side tools billed per use, beside their tokens (the providers' pricing pages, 2025).
PAID_TOOLS = ("web_search", "web_fetch", "code_execution", "code_interpreter", "file_search",
              "image_generation", "google_search", "googlesearch", "url_context", "urlcontext",
              "codeexecution", "google_maps", "googlemaps")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Refused:
    """Why a billed call may not go: the budget is `spent`, or the call's cost could not be
    counted (an unpriced model, per-use tools), which is a refusal like the allow-list's."""

    why: str
    spent: bool = True


@dataclass(frozen=True, slots=True)
class Spend:
    """What a trial's calls have spent; `estimated_tokens` of `tokens` were charged by size."""

    tokens: int = 0
    cost_usd: float = 0.0
    estimated_tokens: int = 0


class Meter:
    """One trial's spend against its budget. Thread-safe: the proxy relays calls in parallel.
    `model` is the agent's configured model, for a call that names none."""

    def __init__(
        self, budget: ModelBudget, prices: PriceTable | None = None, model: str | None = None
    ) -> None:
        self.budget, self.prices, self.model = budget, prices or PriceTable(), model
        self._spend = Spend()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(IN_FLIGHT)

    @property
    def enabled(self) -> bool:
        return self.budget.is_set

    @contextmanager
    def slot(self) -> Iterator[None]:
        """One of the IN_FLIGHT places of a billed call; waits for one when all are taken."""
        if not self.enabled:
            yield
            return
        with self._slots:
            yield

    def spend(self) -> Spend:
        with self._lock:
            return self._spend

    def refusal(self, model: str | None = None, body: Any = None) -> Refused | None:
        """Why the next billed call (to `model`, asking `body`) may not go; None when it may."""
        if not self.enabled:
            return None
        spent, budget = self.spend(), self.budget
        if budget.max_tokens is not None and spent.tokens >= budget.max_tokens:
            return Refused(self.words(spent))
        if budget.max_cost_usd is None:
            return None
        if spent.cost_usd >= budget.max_cost_usd:
            return Refused(self.words(spent))
        named = model or self.model
        if self.prices.price_of(named) is None:
            return Refused(
                f"model {str(named)[:80]!r} has no price in the price table (--prices): under "
                "a cost ceiling a call whose cost cannot be counted is refused",
                spent=False,
            )
        tools = paid_tools(body)
        if tools:
            return Refused(
                f"server-side tools billed per use ({', '.join(tools)}): their fees are not in "
                "the tokens, so a cost ceiling cannot count them",
                spent=False,
            )
        return None

    def charge(
        self, model: str | None, tokens_in: int | None, tokens_out: int | None, *, sized: int = 0
    ) -> None:
        """Count one call: its tokens as its answer gave them; where it gave none, `sized` (the
        bytes of its request and of the answer seen) stands for them."""
        known = (tokens_in or 0) + (tokens_out or 0)
        estimated = sized if tokens_in is None and tokens_out is None else 0
        price = self.prices.price_of(model or self.model)
        cost = 0.0
        if price is not None:
            cost = ((tokens_in or estimated) * price.input + (tokens_out or 0) * price.output) / 1e6
        with self._lock:
            s = self._spend
            self._spend = Spend(
                s.tokens + known + estimated, s.cost_usd + cost, s.estimated_tokens + estimated
            )

    def words(self, spent: Spend | None = None) -> str:
        """'1,234 tokens spent of a ceiling of 1,000 tokens' (and the dollars under a cost
        ceiling: '1,234 tokens, $0.0037 spent of a ceiling of $0.003')."""
        spent = spent or self.spend()
        sized = f" ({spent.estimated_tokens:,} of them by size)" if spent.estimated_tokens else ""
        cost = f", ${spent.cost_usd:.4g}" if self.budget.max_cost_usd is not None else ""
        ceiling = self.budget.describe()
        return f"{spent.tokens:,} tokens{sized}{cost} spent of a ceiling of {ceiling}"


def paid_tools(body: Any) -> list[str]:
    """The server-side tools a request asks for that its provider bills per use: Anthropic's
    typed tools (`web_search_20250305`), the Responses API's tool types, Chat
    Completions' `web_search_options`, Gemini's `googleSearch`, `codeExecution`, `urlContext`."""
    if not isinstance(body, dict):
        return []
    found = ["web_search_options"] if body.get("web_search_options") is not None else []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        names = [str(tool.get("type") or "")] + [k for k in tool if k != "functionDeclarations"]
        for name in names:
            flat = name.lower().replace("-", "_")
            if any(flat.startswith(paid) for paid in PAID_TOOLS):
                found.append(name)
    return found


def usage_asked(body: bytes) -> bytes:
    """A streamed Chat Completions request, asked to end its stream with its usage."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    if not isinstance(doc, dict) or not doc.get("stream"):
        return body
    options = doc.get("stream_options")
    asked = options if isinstance(options, dict) else {}
    doc["stream_options"] = {**asked, "include_usage": True}
    return json.dumps(doc).encode()


def spent_answer(provider: str, why: str) -> tuple[int, dict[str, Any]]:
    """The refusal in the provider's own shape for credit that ran out, which its clients take
    as final rather than retry."""
    said = f"levelfield: this trial's model budget allows no further call: {why}"
    if provider == "anthropic":
        return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": said}}
    if provider == "gemini":
        message = f"Quota exceeded for this trial's model budget, limit: 0. {said}"
        return 429, {"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}}
    quota = "insufficient_quota"
    return 429, {"error": {"message": said, "type": quota, "param": None, "code": quota}}
