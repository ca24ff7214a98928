#!/bin/bash
# Recomputes the bundle digest from the asset definitions in memory (no scratch files).
expected=$(python3 -c '
import hashlib
bundle = hashlib.sha256()
for index in range(56):
    bundle.update(hashlib.sha256(b"asset-%d" % index).digest() * 32768)
print(bundle.hexdigest())')
if [ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
