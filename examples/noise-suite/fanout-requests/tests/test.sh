#!/bin/bash
# Recomputes every stock level from its definition, without the one-second round trips.
python3 - <<'PY'
import hashlib

expected = [
    f"{sku} {int.from_bytes(hashlib.sha256(b'sku-%d' % sku).digest()[:2], 'big') % 500}"
    for sku in range(6000)
]
try:
    ok = open("/app/stock.txt").read().splitlines() == expected
except OSError:
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
