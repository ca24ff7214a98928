#!/bin/bash
# One hash checks the proof of work; an earlier nonce would be a different (also valid) proof,
# so the check is the property, which costs nothing next to the search.
python3 - <<'PY'
from hashlib import sha256

try:
    n = int(open("/app/nonce.txt").read().strip())
    ok = n >= 0 and sha256(b"levelfield-47:%d" % n).hexdigest().startswith("00000")
except (OSError, ValueError):
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
