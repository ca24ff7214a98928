#!/bin/bash
# Brute force is the only way: a preimage search has no shortcut.
set -euo pipefail
python3 - <<'PY'
from hashlib import sha256

n = 0
while not sha256(b"levelfield-47:%d" % n).hexdigest().startswith("00000"):
    n += 1
open("/app/nonce.txt", "w").write(f"{n}\n")
PY
