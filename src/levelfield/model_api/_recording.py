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
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

from levelfield.masking import Masker
from levelfield.model_api.conversation import AnswerReader, ToolCall, trajectory_steps
from levelfield.outcome import REFUSAL_RUN, outcome_for_status
from levelfield.records import ApiCall

SETTLE_TIMEOUT_S = 30.0  # a relayed call still being written down when the agent ends
SETTLE_POLL_S = 0.05
# Refused attempts recorded one by one; past this many, a run of refusals in a row is kept as
# its last one, which says how many it stands for: an agent looping on a refused path costs
# the record (and the harness's memory) no more than its model calls do.
REFUSALS_KEPT = 100
REFUSED_PATH_CHARS = 300


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
    model: str | None = None  # what the call asked for, which prices it
    answer_bytes: int = 0  # read from upstream
    billed: tuple[int, int] = (0, 0)  # tokens in and out charged to the budget so far
    doc: Any = None  # the request's JSON as the proxy parsed it (None: not JSON, or not parsed)
    digest: str = ""  # of the request's content, once: `attempt_of`

    def unbilled(self) -> tuple[int, int]:
        """Tokens the answer has reported (a running total) beyond those already charged. An
        error status or no answer bills nothing."""
        if self.status is None or not 200 <= self.status < 300:
            return 0, 0
        now = (self.reader.tokens_in or 0, self.reader.tokens_out or 0)
        more = (max(0, now[0] - self.billed[0]), max(0, now[1] - self.billed[1]))
        self.billed = (max(now[0], self.billed[0]), max(now[1], self.billed[1]))
        return more

    def reported_no_usage(self) -> bool:
        """A successful answer that never said its tokens: it is charged by size."""
        ok = self.status is not None and 200 <= self.status < 300
        return ok and self.reader.tokens_in is None and self.reader.tokens_out is None

    def size(self) -> int:
        """Bytes of the request and of the answer read: what stands for tokens not reported."""
        return len(self.body) + self.answer_bytes

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
        """The agent closed its connection (nothing left to read, and the end of it). Asked
        with select, not a non-blocking read: the connection has a timeout, and Python waits
        out a socket's timeout before any read of it."""
        if self.client is None:
            return False
        try:
            readable, _, _ = select.select([self.client], [], [], 0)
            return bool(readable) and self.client.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True


CONVERSATION_MAX_BYTES = 256 << 20  # one trial's conversation.jsonl; a CLI trial writes < 20 MiB


class CallLog:
    """The calls of one trial, in the order they ended. The conversation file stops at
    CONVERSATION_MAX_BYTES with a last line that says so (the calls table keeps every call)."""

    def __init__(
        self,
        masker: Masker,
        conversation: Path | None = None,
        max_bytes: int = CONVERSATION_MAX_BYTES,
    ) -> None:
        self.masker, self.conversation, self.max_bytes = masker, conversation, max_bytes
        self._calls: list[ApiCall] = []
        self._tool_calls: list[tuple[ToolCall, float]] = []
        self._in_flight: list[Exchange] = []
        self._settled = threading.Condition()
        self._sealed = False
        self._last: tuple[str, int, bool] | None = None  # body hash, attempt, ok
        self._refusals = 0
        self._run_at: int | None = None  # where the run of refusals past REFUSALS_KEPT stands
        self._run_length = 0
        self._written_bytes = 0
        self._cut = False

    # -- attempts --------------------------------------------------------------------------

    def attempt_of(self, ex: Exchange) -> int:
        """A request identical to a failed one just before it is that request's retry."""
        ex.digest = ex.digest or _digest(ex.body, ex.doc)
        with self._settled:
            if self._last is not None and self._last[0] == ex.digest and not self._last[2]:
                return self._last[1] + 1
        return 1

    def remember(self, ex: Exchange, ok: bool) -> None:
        """Before the answer (or its breaking off) reaches the CLI, which may resend at once."""
        ex.digest = ex.digest or _digest(ex.body, ex.doc)
        with self._settled:
            self._last = (ex.digest, ex.attempt, ok)

    # -- in flight -------------------------------------------------------------------------

    def begin(self, ex: Exchange) -> None:
        with self._settled:
            self._in_flight.append(ex)

    def end(self, ex: Exchange) -> None:
        """Recorded before it leaves the calls in flight: `settle` seals the log once none is
        left, and a call recorded after that would be lost (the agent has its answer already)."""
        self._record(ex)
        with self._settled:
            self._in_flight.remove(ex)
            self._settled.notify_all()

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

    # -- refused attempts ------------------------------------------------------------------

    def refuse(
        self, method: str, path: str, status: int, why: str, outcome: str = "refused"
    ) -> None:
        """An attempt the proxy answered itself, never relayed: a path or method it does not
        carry, or a call past the trial's model budget."""
        call = ApiCall(
            started_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
            latency_s=0.0,
            attempt=1,
            status=status,
            outcome=outcome,  # type: ignore[arg-type]
            endpoint=self.masker.text(path)[:REFUSED_PATH_CHARS],
            method=self.masker.text(method)[:20],
            error=self.masker.text(why)[:500],
        )
        with self._settled:
            if self._sealed:
                return
            self._refusals += 1
            if self._refusals <= REFUSALS_KEPT:
                self._calls.append(call)
                self._write({"call": call.model_dump(), "method": method, "path": path})
                return
            if self._run_at is not None and self._run_at == len(self._calls) - 1:
                self._run_length += 1
                run = REFUSAL_RUN.format(n=self._run_length)
                error = f"{(call.error or '')[: 499 - len(run)]} {run}"
                self._calls[-1] = call.model_copy(update={"error": error})
                return
            self._run_at, self._run_length = len(self._calls), 1
            self._calls.append(call)

    def _write(self, entry: dict[str, Any]) -> None:
        if self.conversation is not None:
            self._append(json.dumps(self.masker.value(entry)) + "\n")

    def _append_entry(self, entry: dict[str, Any]) -> None:
        """One call's line, encoded and masked a block at a time straight into the file, so
        that a request of many megabytes is never held again as a string; past the cap the
        partial line is taken back and the note of the cut written in its place. Called with
        `_settled` held."""
        if self.conversation is None or self._cut:
            return
        with open(self.conversation, "ab") as out:
            start = out.tell()
            capped = _Capped(out, self.max_bytes - self._written_bytes)
            writer = self.masker.writer(capped)  # type: ignore[arg-type]
            try:
                for block in _blocks(json_pieces(entry)):
                    writer.write(block)
                writer.write(b"\n")
                writer.close()
            except _OverCap:
                out.truncate(start)
                self._cut = True
                self._written_bytes += out.write(_cut_note(self.max_bytes))
                return
        self._written_bytes += capped.written

    def _append(self, line: str) -> None:
        """Append under the cap; the first line past it is replaced by the note of the cut.
        Called with `_settled` held or from `refuse`'s own lock, so lines never interleave."""
        if self.conversation is None or self._cut:
            return
        data = line.encode()
        if self._written_bytes + len(data) > self.max_bytes:
            self._cut = True
            data = _cut_note(self.max_bytes)
        with open(self.conversation, "ab") as out:
            out.write(data)
        self._written_bytes += len(data)

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
        entry = self._conversation_entry(ex, call)
        with self._settled:  # one lock for both: the conversation's lines in the calls' order
            if ex.recorded or self._sealed:
                return
            ex.recorded = True
            self._calls.append(call)
            if ex.answered and ex.error is None:  # what the agent got whole, it may have run
                self._tool_calls += [(c, latency) for c in ex.reader.calls]
            if entry is not None:
                self._append_entry(entry)

    def trajectory(self) -> list[dict[str, object]]:
        with self._settled:
            return trajectory_steps(list(self._tool_calls))

    def _conversation_entry(self, ex: Exchange, call: ApiCall) -> dict[str, Any] | None:
        if self.conversation is None:
            return None
        return {
            "call": call.model_dump(),
            "method": ex.method,
            "path": ex.path,
            "request": ex.doc if ex.doc is not None else _json_or_text(ex.body),
            "answer": ex.reader.events if ex.reader.events else None,
            "error": ex.error,
        }


def _digest(body: bytes, doc: Any = None) -> str:
    """Of the JSON's content: a client may serialise the same request with its keys in another
    order on each try (Codex does). Hashed as it is encoded, never held whole a second time."""
    if doc is None:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            doc = json.loads(body) if body else None
    if doc is None:
        return hashlib.sha256(body).hexdigest()
    digest = hashlib.sha256()
    for block in _blocks(json_pieces(doc, sort_keys=True)):
        digest.update(block)
    return digest.hexdigest()


BLOCK_BYTES = 1 << 20


def json_pieces(value: Any, *, sort_keys: bool = False) -> Iterator[str]:
    """`value` as JSON (json.dumps' default form), in pieces none longer than about BLOCK_BYTES:
    json's own encoder hands a string value over whole, and a request carries strings of tens
    of megabytes."""
    if isinstance(value, str):
        if len(value) <= BLOCK_BYTES:
            yield json.dumps(value)
            return
        yield '"'
        for at in range(0, len(value), BLOCK_BYTES):
            yield json.dumps(value[at : at + BLOCK_BYTES])[1:-1]
        yield '"'
    elif isinstance(value, dict):
        yield "{"
        items = sorted(value.items()) if sort_keys else value.items()
        for i, (key, item) in enumerate(items):
            yield (", " if i else "") + json.dumps(str(key)) + ": "
            yield from json_pieces(item, sort_keys=sort_keys)
        yield "}"
    elif isinstance(value, list | tuple):
        yield "["
        for i, item in enumerate(value):
            if i:
                yield ", "
            yield from json_pieces(item, sort_keys=sort_keys)
        yield "]"
    else:
        yield json.dumps(value)


def _blocks(chunks: Iterator[str]) -> Iterator[bytes]:
    """Pieces of JSON as blocks of about BLOCK_BYTES."""
    pending: list[str] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= BLOCK_BYTES:
            yield "".join(pending).encode(errors="surrogatepass")
            pending, size = [], 0
    if pending:
        yield "".join(pending).encode(errors="surrogatepass")


class _OverCap(Exception):
    pass


class _Capped:
    """A file that refuses (raises _OverCap) the write that would take it past `room` bytes."""

    def __init__(self, out: BinaryIO, room: int) -> None:
        self.out, self.room, self.written = out, room, 0

    def write(self, data: bytes) -> int:
        if self.written + len(data) > self.room:
            raise _OverCap
        self.written += len(data)
        return self.out.write(data)

    def flush(self) -> None:
        self.out.flush()


def _cut_note(max_bytes: int) -> bytes:
    note = {"cut": f"conversation capped at {max_bytes} bytes: later calls are in the trial's "
            "calls only"}  # fmt: skip
    return (json.dumps(note) + "\n").encode()


def _json_or_text(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        return body.decode(errors="replace")[:2000]
