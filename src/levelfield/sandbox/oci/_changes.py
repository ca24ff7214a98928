"""The engine's diff of a container against its image, read as a stream and kept only where the
grader looks: the top of the root, the system folders, and programs named python or pip.

The engine answers with one JSON array of every path the container changed, added or deleted.
Read whole, an agent that made a million empty files in /app (a second of its disk's inodes)
cost the harness a third of a GiB of memory at each grading, in a process every trial shares.
Parsed one entry at a time and filtered as it arrives, what the agent adds outside the system
folders costs nothing kept; inside them it is bounded by the ceiling's disk (its inodes).
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

CHUNK_BYTES = 1 << 16
# What the grader's checks read of the diff (`_grader.py`, `outcome/_grading.py`): names made
# at the top, the system folders' files, and the interpreter and pip wherever they are.
KEPT_UNDER = re.compile(r"^/(etc|usr|bin|sbin|lib[^/]*|opt)(/|$)")
KEPT_NAMED = re.compile(r"^(python|pip)[\d.]*$")


def kept(path: str) -> bool:
    return (
        path.count("/") <= 1
        or KEPT_UNDER.match(path) is not None
        or KEPT_NAMED.match(path.rsplit("/", 1)[-1]) is not None
    )


def container_changes(api: Any, container_id: str) -> list[tuple[str, int]]:
    """(path, kind) for each change the grader's checks read; kind 0 changed, 1 added, 2
    deleted. Raises what the engine's API raises (a container gone, an endpoint missing)."""
    response = api._get(api._url("/containers/{0}/changes", container_id), stream=True)
    api._raise_for_status(response)
    try:
        entries = _entries(response.iter_content(CHUNK_BYTES))
        return [(e["Path"], int(e["Kind"])) for e in entries if kept(str(e.get("Path", "")))]
    finally:
        response.close()


def _entries(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    """The objects of one JSON array, as its bytes arrive (`null`: none). ValueError when the
    answer is not one."""
    decoder, text = json.JSONDecoder(), codecs.getincrementaldecoder("utf-8")("surrogateescape")
    buffer, started = "", False
    for chunk in chunks:
        buffer += text.decode(chunk)
        position = 0
        while True:
            position = _past_separators(buffer, position)
            rest = buffer[position : position + 4]
            if not rest or (not started and "null".startswith(rest) and rest != "null"):
                break  # more to come
            if not started:
                if rest == "null":
                    return
                if rest[0] != "[":
                    raise ValueError(f"the engine's diff is not a JSON array: {rest!r}")
                started, position = True, position + 1
                continue
            if rest[0] == "]":
                return
            try:
                entry, position = decoder.raw_decode(buffer, position)
            except json.JSONDecodeError:
                break  # an entry cut at the chunk's end: the next chunk completes it
            if isinstance(entry, dict):
                yield entry
        buffer = buffer[position:]
    if buffer.strip():
        raise ValueError("the engine's diff ended inside an entry")


def _past_separators(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n,":
        position += 1
    return position
