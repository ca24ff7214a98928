#!/bin/bash
# Recomputes the image digest object by object (1 MiB at a time, far below the spec).
expected=$(python3 -c '
import hashlib
image = hashlib.sha256()
for index in range(128):
    image.update(hashlib.sha256(b"object-%d" % index).digest() * 32768)
print(image.hexdigest())')
if [ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
