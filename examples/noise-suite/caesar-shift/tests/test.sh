#!/bin/bash
# The input must be the one shipped (an agent could rewrite it to match its own answer).
shipped=9c3d63d6a7b211ce576361791ffe3857265dd279c962da6359f452481e0aa91f
if ! echo "$shipped  /app/message.txt" | sha256sum -c --quiet; then
  echo 0 > /logs/verifier/reward.txt
  exit 0
fi
# Brute-forces the shift independently (the one that yields "benchmark" and "ceiling") with tr.
lower=abcdefghijklmnopqrstuvwxyz
upper=ABCDEFGHIJKLMNOPQRSTUVWXYZ
expected=""
for k in $(seq 0 25); do
  candidate=$(tr "${lower:k}${lower:0:k}${upper:k}${upper:0:k}" "$lower$upper" < /app/message.txt)
  if grep -q benchmark <<< "$candidate" && grep -q ceiling <<< "$candidate"; then
    expected=$candidate
    break
  fi
done
if [ -n "$expected" ] && [ -f /app/plain.txt ] && [ "$(cat /app/plain.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
