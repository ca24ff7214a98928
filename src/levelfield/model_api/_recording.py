"""What the proxy keeps of each call it relays: the trial's `ApiCall`s, its tool calls (the
trajectory) and its conversation file, each call recorded as what it was.

A call is `ok` only when its whole answer reached the agent. An error status, an error event in a
200 stream, a stream broken off or ended before its protocol's last event, and no answer at all
are recorded with the outcome they stand for (`outcome.outcome_for_status`). A call the agent's
side ended first (its CLI gave up, exited or was killed at its deadline) is `cut_short`, the
agent's doing: it is recorded when the agent's run ends, at once when its connection is already
closed, and after SETTLE_TIMEOUT_S at the latest, never dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from levelfield.masking import Masker
from levelfield.model_api.conversation import AnswerReader, ToolCall, trajectory_steps
from levelfield.outcome import outcome_for_status
from levelfield.records import ApiCall

SETTLE_TIMEOUT_S = 30.0  # a relayed call still being written down when the agent ends
SETTLE_POLL_S = 0.05


@dataclass
class Exchange:
    """One relayed call while it happens."""

    provider: str
    method: str
    path: str
    body: bytes
    started: datetime
    t0: float
    client: socket.socket | None = None  # the agent's connection, to see it close
    attempt: int = 1
    status: int | None = None
    first_token_s: float | None = None
    reader: AnswerReader = field(default_factory=lambda: AnswerReader(streamed=False))
    retry_after_s: float | None = None
    error: str | None = None  # the upstream failed (no answer, or an answer broken off)
    cut_short: str | None = None  # why the agent's side ended it first
    complete: bool = False  # the whole answer came from upstream; it is being handed on
    begun: bool = False  # the agent has the answer's status line: no 502 can replace it
    answered: bool = False  # the whole answer went to the agent
    recorded: bool = False

    def outcome(self) -> tuple[str, str | None]:
        """The recorded outcome, and the words behind it when the status does not say it."""
        if self.cut_short is not None:
            return "cut_short", self.cut_short
        if self.status is None:
            return outcome_for_status(None), self.error
        stream_error = self.reader.error
        if stream_error is not None:
            said = f"error in the answer after {self.status}: {stream_error.message}"
            return outcome_for_status(stream_error.status, stream_error.message), said
        if 200 <= self.status < 300:
            if self.error is not None:
                return outcome_for_status(None), f"answer broken off: {self.error}"
            if self.reader.streamed and self.reader.known and not self.reader.finished:
                return outcome_for_status(None), "the stream ended before its last event"
            return "ok", None
        return outcome_for_status(self.status, json.dumps(self.reader.events)), None

    def client_gone(self) -> bool:
        """The agent closed its connection (nothing left to read, and the end of it)."""
        if self.client is None:
            return False
        try:
            return self.client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True


class CallLog:
    """The calls of one trial, in the order they ended."""

    def __init__(self, masker: Masker, conversation: Path | None = None) -> None:
        self.masker, self.conversation = masker, conversation
        self._calls: list[ApiCall] = []
        self._tool_calls: list[tuple[ToolCall, float]] = []
        self._in_flight: list[Exchange] = []
        self._settled = threading.Condition()
        self._sealed = False
        self._last: tuple[str, int, bool] | None = None  # body hash, attempt, ok

    # -- attempts --------------------------------------------------------------------------

    def attempt_of(self, body: bytes) -> int:
        """A request identical to a failed one just before it is that request's retry."""
        digest = _digest(body)
        with self._settled:
            if self._last is not None and self._last[0] == digest and not self._last[2]:
                return self._last[1] + 1
        return 1

    def remember(self, ex: Exchange, ok: bool) -> None:
        """Before the answer (or its breaking off) reaches the CLI, which may resend at once."""
        with self._settled:
            self._last = (_digest(ex.body), ex.attempt, ok)

    # -- in flight -------------------------------------------------------------------------

    def begin(self, ex: Exchange) -> None:
        with self._settled:
            self._in_flight.append(ex)

    def end(self, ex: Exchange) -> None:
        with self._settled:
            self._in_flight.remove(ex)
            self._settled.notify_all()
        self._record(ex)

    def settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> list[ApiCall]:
        """Every call, once those in flight are recorded: a CLI may exit the moment its last
        answer arrives, before the relaying thread has written it down. A call whose agent has
        closed its connection before the answer was whole is cut short at once; one still in
        flight after `timeout_s` is recorded cut short then. Later calls are not recorded."""
        deadline = time.monotonic() + timeout_s
        with self._settled:
            while self._in_flight and time.monotonic() < deadline:
                for ex in self._in_flight:  # an agent that got all of it may exit at once
                    done = ex.complete or ex.reader.finished
                    if not done and ex.cut_short is None and ex.client_gone():
                        ex.cut_short = "the agent closed its connection before the answer came"
                if all(ex.cut_short is not None for ex in self._in_flight):
                    break
                self._settled.wait(SETTLE_POLL_S)
            pending = list(self._in_flight)
        for ex in pending:
            waited = round(time.monotonic() - ex.t0, 1)
            ex.cut_short = ex.cut_short or f"in flight for {waited} s when the agent ended"
            self._record(ex)
        with self._settled:
            self._sealed = True
            return list(self._calls)

    # -- recording -------------------------------------------------------------------------

    def _record(self, ex: Exchange) -> None:
        outcome, error = ex.outcome()
        latency = time.monotonic() - ex.t0
        ok = outcome == "ok"
        call = ApiCall(
            started_at=ex.started.isoformat(timespec="milliseconds"),
            latency_s=round(latency, 4),
            attempt=ex.attempt,
            status=ex.status,
            outcome=outcome,  # type: ignore[arg-type]
            tokens_in=ex.reader.tokens_in,
            tokens_out=ex.reader.tokens_out,
            endpoint=ex.path.split("?")[0],
            first_token_s=round(ex.first_token_s if ex.first_token_s is not None else latency, 4)
            if ok
            else None,
            streamed=ex.reader.streamed,
            retry_after_s=ex.retry_after_s,
            error=self.masker.text(error)[:500] if error else None,
        )
        line = self._conversation_line(ex, call)
        with self._settled:  # one lock for both: the conversation's lines in the calls' order
            if ex.recorded or self._sealed:
                return
            ex.recorded = True
            self._calls.append(call)
            if ex.answered and ex.error is None:  # what the agent got whole, it may have run
                self._tool_calls += [(c, latency) for c in ex.reader.calls]
            if line is not None and self.conversation is not None:
                with open(self.conversation, "a") as out:
                    out.write(line)

    def trajectory(self) -> list[dict[str, object]]:
        with self._settled:
            return trajectory_steps(list(self._tool_calls))

    def _conversation_line(self, ex: Exchange, call: ApiCall) -> str | None:
        if self.conversation is None:
            return None
        entry = {
            "call": call.model_dump(),
            "method": ex.method,
            "path": ex.path,
            "request": _json_or_text(ex.body),
            "answer": ex.reader.events if ex.reader.events else None,
            "error": ex.error,
        }
        return json.dumps(self.masker.value(entry)) + "\n"


def _digest(body: bytes) -> str:
    """Of the JSON's content: a client may serialise the same request with its keys in another
    order on each try (Codex does)."""
    with contextlib.suppress(ValueError, UnicodeDecodeError):
        body = json.dumps(json.loads(body), sort_keys=True).encode()
    return hashlib.sha256(body).hexdigest()


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return body.decode(errors="replace")[:2000]
