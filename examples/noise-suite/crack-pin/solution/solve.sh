#!/bin/bash
# Try every PIN in order; PBKDF2 is built to make each try cost the same, with no shortcut.
set -euo pipefail
python3 - <<'PY'
from hashlib import pbkdf2_hmac

vault = dict(line.split() for line in open("/app/vault.txt") if line.strip())
salt, rounds, target = vault["salt"].encode(), int(vault["iterations"]), vault["hash"]
for pin in range(10_000):
    if pbkdf2_hmac("sha256", b"%04d" % pin, salt, rounds).hex() == target:
        open("/app/pin.txt", "w").write(f"{pin:04d}\n")
        break
PY
