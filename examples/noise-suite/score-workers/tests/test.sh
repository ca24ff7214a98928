#!/bin/bash
# Rebuilds each 4 KiB weight window a document reads straight from the weights' definition
# (never the whole 12 MiB) and recomputes every score.
python3 - <<'PY'
import hashlib

MIB, WINDOW = 1 << 20, 4096
blocks = [hashlib.sha256(b"weights-%d" % i).digest() for i in range(12)]


def window(offset):
    out = bytearray()
    pos = offset
    while len(out) < WINDOW:
        block, inner = divmod(pos, MIB)
        take = min(WINDOW - len(out), MIB - inner)
        start = inner % 32  # a block is its 32-byte digest repeated
        out += (blocks[block] * (take // 32 + 2))[start : start + take]
        pos += take
    return bytes(out)


expected = []
for doc_id in range(4000):
    key = hashlib.sha256(b"doc-%d" % doc_id).digest()
    offset = int.from_bytes(key[:4], "big") % (12 * MIB - WINDOW)
    mixed = hashlib.sha256(window(offset) + key).digest()
    expected.append(f"{doc_id} {int.from_bytes(mixed[:4], 'big') % 1000}")
try:
    ok = open("/app/scores.txt").read().splitlines() == expected
except OSError:
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
