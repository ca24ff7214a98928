"""What levelfield's Harbor environment writes beside Harbor's `result.json`, at
`<trial>/levelfield/record.json`: the hosted sandbox's `TrialRecord` (`hosted/record.py`)."""

from __future__ import annotations

from levelfield.hosted.record import (
    RECORD_DIR,
    RECORD_FILE,
    CeilingHitNote,
    read_record,
    record_path,
)

__all__ = [
    "RECORD_DIR", "RECORD_FILE", "CeilingHitNote", "read_record",
    "record_path",
]  # fmt: skip
