#!/bin/bash
# The input must be the one shipped (an agent could rewrite it to match its own answer).
shipped=f8c5317c72425aebf204fa33fa749a41bd4c7c81e7c30d9fbec9c7e8e133e44e
if ! echo "$shipped  /app/sales.csv" | sha256sum -c --quiet; then
  echo 0 > /logs/verifier/reward.txt
  exit 0
fi
# Recomputes the totals with awk (in cents, so no float rounding) and compares line by line.
expected=$(awk -F, 'NR > 1 { split($3, p, "."); cents[$2] += p[1] * 100 + p[2] }
  END { print "region,total"; for (r in cents) printf "%s,%d.%02d\n", r, cents[r] / 100, cents[r] % 100 }' \
  /app/sales.csv | { read -r header; echo "$header"; sort; })
if [ -f /app/totals.csv ] && [ "$(cat /app/totals.csv)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
