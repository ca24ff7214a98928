"""Model clients for the terminal agent: one `complete()` over the OpenAI-compatible and the
Anthropic APIs, with our own retry policy so that every attempt is seen and recorded.

The SDKs' built-in retries are off (max_retries=0): a retry hidden inside the SDK would be
invisible to the telemetry, and rate limits by hour of day are one of the hidden variables the
reports look for. Rate limits, overloads, 5xx and connection errors are retried with exponential
backoff; other 4xx are not (retrying a bad request cannot help). Whose failure a call's end is
follows the rule every path shares (`outcome.is_api_failure`): what survives the policy and is
the API's (401, 403, 429, 5xx, no answer) is an `ApiError`, classified infra_error/api_error;
what is the agent's own (another 4xx, such as a context too long, or a call its own deadline cut
short) ends the agent's run as `Stopped`, and the trial is graded as it stands.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import SecretStr

from levelfield.errors import ApiError, RunConfigError
from levelfield.model_api.budget import Meter
from levelfield.outcome import is_api_failure, outcome_for_status
from levelfield.records import ApiCall, ModelBudget

Provider = Literal["openai", "anthropic"]
MAX_TOKENS = 2048
DEADLINE_SLACK_S = 0.1  # a timeout this close to the agent's deadline was the deadline's


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    first_backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def backoff_s(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.first_backoff_s * 2 ** (attempt - 1))


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    tokens_in: int | None
    tokens_out: int | None


@dataclass(frozen=True, slots=True)
class Stopped:
    """The agent's own end of its conversation: its deadline cut a call short (`deadline`), or
    the API refused a request for the agent's own reason (a 4xx other than 401, 403, 429)."""

    why: str
    deadline: bool


@dataclass
class ChatClient:
    provider: Provider
    model: str
    api_key: SecretStr | None
    base_url: str | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    meter: Meter = field(default_factory=lambda: Meter(ModelBudget()))
    calls: list[ApiCall] = field(default_factory=list)
    _sdk: Any = None

    def __post_init__(self) -> None:
        key = self.api_key.get_secret_value() if self.api_key else "EMPTY"  # local servers
        try:
            if self.provider == "anthropic":
                import anthropic

                self._sdk = anthropic.Anthropic(api_key=key, base_url=self.base_url, max_retries=0)
            else:
                import openai

                self._sdk = openai.OpenAI(api_key=key, base_url=self.base_url, max_retries=0)
        except ImportError as exc:
            raise RunConfigError(
                f"the terminal agent needs the {self.provider} SDK: "
                f"pip install 'levelfield[agents]'"
            ) from exc

    @property
    def endpoint(self) -> str:
        return "/v1/messages" if self.provider == "anthropic" else "/chat/completions"

    def complete(
        self, system: str, messages: list[dict[str, str]], *, deadline: float
    ) -> Reply | Stopped:
        for attempt in range(1, self.retry.attempts + 1):
            started, t0 = datetime.now(UTC), time.monotonic()
            over = self._over_budget(started, t0)
            if over is not None:
                return over
            try:
                reply = self._request(system, messages, timeout_s=max(1.0, deadline - t0))
            except Exception as exc:
                outcome, status = classify_api_error(exc)
                stopped = _agents_own_end(exc, outcome, status, deadline)
                error = stopped.why if stopped is not None else None
                if stopped is not None and stopped.deadline:
                    outcome = "cut_short"  # the agent's deadline ended it, not the API
                call = _call(started, t0, attempt, status, outcome, None, self.endpoint, error)
                self.calls.append(call)
                if stopped is not None:
                    return stopped
                wait = self.retry.backoff_s(attempt)
                retryable = outcome != "client_error"  # a refused key is not retried either
                if not retryable or attempt == self.retry.attempts or t0 + wait > deadline:
                    raise ApiError(
                        f"{self.provider} API: {type(exc).__name__} after {attempt} "
                        f"attempt(s): {_short(exc)}",
                        tuple(self.calls),
                    ) from None
                time.sleep(wait)
                continue
            self.calls.append(_call(started, t0, attempt, 200, "ok", reply, self.endpoint))
            sized = len(system) + sum(len(m["content"]) for m in messages) + len(reply.text)
            self.meter.charge(self.model, reply.tokens_in, reply.tokens_out, sized=sized)
            return reply
        raise AssertionError("unreachable")

    def _over_budget(self, started: datetime, t0: float) -> Stopped | None:
        """The trial's model budget is spent: the call is not made, and the agent's run ends
        there, graded as it stands (`budget.py` says how a ceiling is judged)."""
        refused = self.meter.refusal(self.model)
        if refused is None:
            return None
        outcome = "budget_exhausted" if refused.spent else "refused"
        self.calls.append(_call(started, t0, 1, None, outcome, None, self.endpoint, refused.why))
        return Stopped(f"the model budget refused the call: {refused.why}", deadline=False)

    def _request(self, system: str, messages: list[dict[str, str]], *, timeout_s: float) -> Reply:
        if self.provider == "anthropic":
            response = self._sdk.messages.create(
                model=self.model,
                system=system,
                messages=messages,
                max_tokens=MAX_TOKENS,
                timeout=timeout_s,
            )
            text = "".join(getattr(block, "text", "") for block in response.content)
            usage = response.usage
            return Reply(text, usage.input_tokens, usage.output_tokens)
        response = self._sdk.chat.completions.create(
            model=self.model,
            messages=[{"role": "system", "content": system}, *messages],
            max_tokens=MAX_TOKENS,
            timeout=timeout_s,
        )
        usage = response.usage
        return Reply(
            response.choices[0].message.content or "",
            usage.prompt_tokens if usage else None,
            usage.completion_tokens if usage else None,
        )


def classify_api_error(exc: BaseException) -> tuple[str, int | None]:
    """Status codes of both SDKs' APIStatusError; no status means no response came."""
    status = getattr(exc, "status_code", None)
    return outcome_for_status(status, str(exc)), status


def _agents_own_end(
    exc: BaseException, outcome: str, status: int | None, deadline: float
) -> Stopped | None:
    """A failed call that is the agent's doing, not the API's (the shared rule), or None."""
    timed_out = any("Timeout" in cls.__name__ for cls in type(exc).__mro__)
    if status is None and timed_out and time.monotonic() >= deadline - DEADLINE_SLACK_S:
        return Stopped("the agent's own deadline cut its model call short", deadline=True)
    if not is_api_failure(status, outcome):
        return Stopped(f"the model API refused the agent's request: {_short(exc)}", False)
    return None


def guess_provider(model: str, base_url: str | None, provider: str | None) -> tuple[Provider, str]:
    """'anthropic/claude-x' or 'claude-x' → anthropic; a base URL means OpenAI-compatible."""
    if provider in ("openai", "anthropic"):
        return provider, model  # type: ignore[return-value]
    if base_url:
        return "openai", model
    prefix, _, rest = model.partition("/")
    if prefix in ("openai", "anthropic") and rest:
        return prefix, rest  # type: ignore[return-value]
    return ("anthropic" if model.startswith("claude") else "openai"), model


def _call(
    started: datetime,
    t0: float,
    attempt: int,
    status: int | None,
    outcome: str,
    reply: Reply | None = None,
    endpoint: str | None = None,
    error: str | None = None,
) -> ApiCall:
    latency = round(time.monotonic() - t0, 4)
    return ApiCall(
        started_at=started.isoformat(timespec="milliseconds"),
        latency_s=latency,
        attempt=attempt,
        status=status,
        outcome=outcome,  # type: ignore[arg-type]
        tokens_in=reply.tokens_in if reply else None,
        tokens_out=reply.tokens_out if reply else None,
        endpoint=endpoint,
        first_token_s=latency if reply else None,  # not streamed: the answer comes whole
        error=error,
    )


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else ""
