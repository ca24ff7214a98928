"""The relevance model: 12 MiB of weights, and a score for a document id (0 to 999).

Loading is the expensive part: every process that calls `load_model()` holds its own 12 MiB.
"""

import hashlib

MODEL_MIB = 12
WINDOW = 4096


def load_model() -> bytearray:
    weights = bytearray(MODEL_MIB << 20)
    for i in range(MODEL_MIB):
        weights[i << 20 : (i + 1) << 20] = hashlib.sha256(b"weights-%d" % i).digest() * 32768
    return weights


def score(weights: bytearray, doc_id: int) -> int:
    key = hashlib.sha256(b"doc-%d" % doc_id).digest()
    offset = int.from_bytes(key[:4], "big") % (len(weights) - WINDOW)
    mixed = hashlib.sha256(weights[offset : offset + WINDOW] + key).digest()
    return int.from_bytes(mixed[:4], "big") % 1000
