"""A trial's conversation file stops at its cap, with a last line that says so: an agent that
sends huge model calls costs the harness bounded disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from levelfield.masking import Masker
from levelfield.model_api import _recording
from levelfield.model_api._recording import CallLog


def test_the_conversation_stops_at_its_cap_with_the_cut_noted(tmp_path: Path) -> None:
    conversation = tmp_path / "conversation.jsonl"
    log = CallLog(Masker(), conversation, max_bytes=2000)
    for i in range(40):
        log.refuse("POST", f"/openai/responses/{i}", 400, "x" * 100)
    lines = [json.loads(line) for line in conversation.read_text().splitlines()]
    assert conversation.stat().st_size <= 2000 + 200
    assert "capped at 2000 bytes" in lines[-1]["cut"]
    assert sum("cut" in line for line in lines) == 1
    assert all("call" in line for line in lines[:-1])


def _relayed(log: CallLog, body: bytes, doc: object) -> None:
    """One call as the proxy records it: begun, answered with an error status, ended."""
    from datetime import UTC, datetime

    from levelfield.model_api._recording import Exchange

    ex = Exchange("anthropic", "POST", "/anthropic/v1/messages", body, datetime.now(UTC), 0.0)
    ex.doc, ex.status, ex.error = doc, 500, "upstream broke"
    ex.attempt = log.attempt_of(ex)
    log.begin(ex)
    log.end(ex)


def test_a_call_of_many_megabytes_is_written_in_blocks_masked_and_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written a block at a time (never held whole again as a string): the line is json's own
    encoding of the entry, and a secret that straddles two blocks is still masked."""
    monkeypatch.setattr(_recording, "BLOCK_BYTES", 1000)
    secret = "sk-ant-" + "k" * 40
    text = "a" * 995 + secret + "b" * 3000  # the key starts 5 bytes before a block's end
    doc = {"model": "m", "messages": [{"role": "user", "content": text}], "n": 1.5}
    conversation = tmp_path / "conversation.jsonl"
    _relayed(CallLog(Masker().add(secret), conversation), json.dumps(doc).encode(), doc)
    (line,) = conversation.read_text().splitlines()
    assert secret not in line and "k" * 40 not in line
    written = json.loads(line)
    assert written["request"]["messages"][0]["content"] == text.replace(secret, "***")


def test_a_call_past_the_cap_is_taken_back_and_the_cut_noted(tmp_path: Path) -> None:
    conversation = tmp_path / "conversation.jsonl"
    log = CallLog(Masker(), conversation, max_bytes=50_000)
    small = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    _relayed(log, json.dumps(small).encode(), small)
    big = {"model": "m", "messages": [{"role": "user", "content": "x" * 200_000}]}
    _relayed(log, json.dumps(big).encode(), big)
    lines = [json.loads(line) for line in conversation.read_text().splitlines()]
    assert [("cut" in line) for line in lines] == [False, True]
    assert conversation.stat().st_size < 50_000


@pytest.mark.parametrize(
    "doc",
    [
        {
            "b": [1, 2.5, None, True, "x" * 3000, {"z": "é\u2028\U0001f600" * 700}],
            "a": 'q"\\\n' * 900,
        },
        ["s" * 2500, [], {}],
        "t" * 1001,
        3,
    ],
)
def test_json_pieces_are_jsons_own_encoding(doc: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_recording, "BLOCK_BYTES", 1000)
    assert "".join(_recording.json_pieces(doc)) == json.dumps(doc)
    assert "".join(_recording.json_pieces(doc, sort_keys=True)) == json.dumps(doc, sort_keys=True)
    assert max(len(p) for p in _recording.json_pieces(doc)) <= 12 * 1000 + 2  # a \uXXXX pair
