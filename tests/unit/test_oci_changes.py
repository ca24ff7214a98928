"""The engine's diff read as a stream: the same entries as `json.loads` of the whole answer,
however the bytes arrive, and only those the grader's checks read."""

from __future__ import annotations

import json

import pytest

from levelfield.sandbox.oci._changes import _entries, kept

DIFF = [
    *({"Path": f"/app/junk/f\u00fc{i}", "Kind": 1} for i in range(3000)),
    {"Path": "/etc/pip.conf", "Kind": 1},
    {"Path": "/pytest.ini", "Kind": 1},
    {"Path": "/usr/local/lib/python3.13/site-packages/x.pth", "Kind": 1},
    {"Path": "/root/.local/bin/pip3", "Kind": 0},
    {"Path": "/tmp/a \"quoted\" ] name,", "Kind": 2},
]


@pytest.mark.parametrize("size", [1, 2, 5, 97, 4096, 1 << 20])
def test_every_entry_as_json_reads_it_whatever_the_chunks(size: int) -> None:
    raw = json.dumps(DIFF, indent=1).encode()
    chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
    assert list(_entries(chunks)) == json.loads(raw)


@pytest.mark.parametrize("raw", [b"null", b"[]", b" [ ] "])
def test_no_changes(raw: bytes) -> None:
    assert list(_entries([raw[:2], raw[2:]])) == []


def test_an_answer_cut_short_is_an_error() -> None:
    with pytest.raises(ValueError, match="inside an entry"):
        list(_entries([b'[{"Path": "/etc/x", "Ki']))


def test_what_is_kept() -> None:
    assert [e["Path"] for e in DIFF if kept(e["Path"])] == [
        "/etc/pip.conf",
        "/pytest.ini",
        "/usr/local/lib/python3.13/site-packages/x.pth",
        "/root/.local/bin/pip3",
    ]
