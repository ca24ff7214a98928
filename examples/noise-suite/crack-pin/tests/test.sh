#!/bin/bash
# One PBKDF2 call checks the answer against the vault's hash (kept here, not read from /app).
python3 - <<'PY'
from hashlib import pbkdf2_hmac

HASH = "5cc17469e1be1eb11ab5ff97a5e4067a358a974c5c535e7456dfa3d7513c29be"
try:
    pin = open("/app/pin.txt").read().strip()
    ok = (len(pin) == 4 and pin.isdigit()
          and pbkdf2_hmac("sha256", pin.encode(), b"levelfield", 300).hex() == HASH)
except (OSError, ValueError):
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
