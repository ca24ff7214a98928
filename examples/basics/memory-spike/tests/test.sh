#!/bin/bash
# Streams the same 256 MiB in 1 MiB pieces, so the check itself stays far below the spec.
expected=$(python3 -c 'import hashlib
h, block = hashlib.sha256(), bytes(range(256)) * 4096
for _ in range(256):
    h.update(block)
print(h.hexdigest())')
if [ "$(cat /app/digest.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
