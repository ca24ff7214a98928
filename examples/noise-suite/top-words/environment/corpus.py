"""The corpus: 2.4 million words of machine-made English in 40 chunks, the same on every run.

`chunks()` yields it as bytes, one chunk (about 350 KiB, ending in a newline) at a time.
"""

import random

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can out up who them what some into time only other could than then now its two may"
).split()
CHUNKS = 40
WORDS_PER_CHUNK = 60_000


def _table() -> list[bytes]:
    """Byte value → word, Zipf-like: word i gets about 52 / (i + 1) of the 256 values."""
    weights = [max(1, round(52 / (i + 1))) for i in range(len(WORDS))]
    weights[0] += 256 - sum(weights)
    return [w.encode() for w, n in zip(WORDS, weights) for _ in range(n)]


def chunks():
    table = _table()
    for index in range(CHUNKS):
        picks = random.Random(index).randbytes(WORDS_PER_CHUNK)
        yield b" ".join(map(table.__getitem__, picks)) + b"\n"
