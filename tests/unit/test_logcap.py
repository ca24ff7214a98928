"""Each log keeps its head and its tail within LOG_MAX_BYTES, with the cut marked in it and noted
for the evidence, in bounded memory (_logcap.py)."""

from __future__ import annotations

from pathlib import Path

from levelfield.masking import Masker
from levelfield.sandbox._logcap import MIN_TAIL_BYTES, LogCaps


def test_a_flood_keeps_its_first_and_last_bytes_and_marks_the_cut(tmp_path: Path) -> None:
    caps, log = LogCaps(max_bytes=1000), tmp_path / "agent.log"
    sink = caps.open(log)
    sink.write(b"START" + b"a" * 3000)
    for _ in range(50):
        sink.write(b"x" * 997)
    sink.write(b"b" * 100 + b"THE END")
    sink.close()
    data = log.read_bytes()
    head, _, tail = data.partition(b"\n[levelfield: ")
    assert head.startswith(b"START") and len(head) == 500
    assert tail.endswith(b"THE END") and b"bytes cut here" in tail
    assert len(data) < 1000 + 200 and not list(tmp_path.glob("agent.log.tail-*"))
    (note,) = caps.notes()
    assert note.startswith("agent.log cut: 52962 bytes printed, 51962 bytes cut from the middle")


def test_a_short_log_is_kept_whole_and_gives_its_budget_back(tmp_path: Path) -> None:
    caps, log = LogCaps(max_bytes=1000), tmp_path / "verifier.log"
    for word in (b"one\n", b"two\n"):
        sink = caps.open(log)
        sink.write(word)
        sink.close()
    assert log.read_bytes() == b"one\ntwo\n" and caps.notes() == []


def test_once_a_log_is_full_each_exec_keeps_only_its_own_tail(tmp_path: Path) -> None:
    caps, log = LogCaps(max_bytes=4 * MIN_TAIL_BYTES), tmp_path / "agent.log"
    first = caps.open(log)
    first.write(b"x" * (20 * MIN_TAIL_BYTES))
    first.close()
    size = log.stat().st_size
    second = caps.open(log)
    second.write(b"y" * (MIN_TAIL_BYTES * 3) + b"last words")
    second.close()
    added = log.read_bytes()[size:]
    assert added.endswith(b"last words") and len(added) < MIN_TAIL_BYTES + 200


def test_masking_happens_before_the_cut(tmp_path: Path) -> None:
    secret = "sk-logcap-secret-0123456789"
    caps, log = LogCaps(max_bytes=64), tmp_path / "agent.log"
    sink = caps.open(log)
    writer = Masker().add(secret).writer(sink)
    for _ in range(200):
        writer.write(f"key {secret} ".encode())
    writer.close()
    sink.close()
    assert secret.encode() not in log.read_bytes() and b"***" in log.read_bytes()
