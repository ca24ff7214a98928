"""Reading answers as the proxy relays them: Gemini's shapes, and what a stream carried besides
its content (its last event, or an error after its 200), which decides what the call is recorded
as (`_recording.Exchange.outcome`)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from levelfield.model_api._http import sse_event
from levelfield.model_api._recording import Exchange
from levelfield.model_api.conversation import AnswerReader

LS = {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"}}}
GEMINI_CHUNKS = [
    {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": "Let me look."}]}, "index": 0}
        ],
        "usageMetadata": {"promptTokenCount": 120, "candidatesTokenCount": 3},
    },
    {
        "candidates": [
            {
                "content": {"role": "model", "parts": [LS]},
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 120,
            "candidatesTokenCount": 9,
            "thoughtsTokenCount": 4,
        },
    },
]


def _streamed(events: list[bytes]) -> AnswerReader:
    reader = AnswerReader(streamed=True)
    for event in events:
        reader.feed(event)
    reader.finish()
    return reader


def test_a_gemini_stream_gives_usage_tool_calls_and_its_end() -> None:
    reader = _streamed([sse_event(chunk) for chunk in GEMINI_CHUNKS])
    assert (reader.tokens_in, reader.tokens_out) == (120, 13)  # thoughts are output too
    assert [(c.name, c.command()) for c in reader.calls] == [("run_shell_command", "ls")]
    assert reader.finished and reader.error is None and reader.first_token


def test_a_gemini_answer_whole_or_as_a_json_array() -> None:
    whole = AnswerReader(streamed=False)
    whole.finish(json.dumps(GEMINI_CHUNKS[1]).encode())
    assert whole.tokens_in == 120 and whole.calls[0].name == "run_shell_command"
    array = AnswerReader(streamed=False)
    array.finish(json.dumps(GEMINI_CHUNKS).encode())  # streamGenerateContent without alt=sse
    assert array.tokens_out == 13 and len(array.calls) == 1


def _exchange(reader: AnswerReader, status: int | None = 200, **fields: object) -> Exchange:
    ex = Exchange("p", "POST", "/x", b"{}", datetime.now(UTC), 0.0, status=status, **fields)
    ex.reader = reader
    return ex


def test_an_error_event_after_the_200_is_recorded_as_the_status_it_stands_for() -> None:
    start = sse_event({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})
    overloaded = sse_event(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"
    )
    outcome, said = _exchange(_streamed([start, overloaded])).outcome()
    assert outcome == "overloaded" and "overloaded_error" in (said or "")
    failed = sse_event(
        {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "x"}}}
    )
    assert _exchange(_streamed([failed])).outcome()[0] == "server_error"
    context = sse_event({"error": {"message": "too long", "code": "context_length_exceeded"}})
    assert _exchange(_streamed([context])).outcome()[0] == "client_error"  # the agent's
    gemini = sse_event({"error": {"code": 503, "message": "x", "status": "UNAVAILABLE"}})
    assert _exchange(_streamed([sse_event(GEMINI_CHUNKS[0]), gemini])).outcome()[0] == (
        "server_error"
    )


def test_a_stream_broken_off_or_ended_short_is_no_answer_and_a_cut_short_call_the_agents() -> None:
    start = sse_event({"type": "message_start", "message": {"usage": {"input_tokens": 5}}})
    stop = sse_event({"type": "message_stop"})
    assert _exchange(_streamed([start, stop])).outcome() == ("ok", None)
    assert _exchange(_streamed([start])).outcome() == (
        "connection_error",
        "the stream ended before its last event",
    )
    broken = _exchange(_streamed([start]), error="ConnectionResetError: reset by peer")
    assert broken.outcome()[0] == "connection_error"
    gone = _exchange(_streamed([start]), cut_short="the agent closed its connection")
    assert gone.outcome()[0] == "cut_short"
    assert _exchange(AnswerReader(streamed=False), status=None).outcome()[0] == (
        "connection_error"
    )
    unknown = _streamed([b"data: plain text\n\n"])  # a protocol not read here: not judged
    assert _exchange(unknown).outcome() == ("ok", None)
