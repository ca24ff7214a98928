#!/bin/bash
# Recomputes each event's day and amount from its id (one event at a time, no batch, no
# redeliveries) and compares the report and the total.
python3 - <<'PY'
import hashlib

totals = [0] * 30
for event_id in range(60_000):
    digest = hashlib.sha256(b"%d" % event_id).hexdigest()
    totals[int(digest[:8], 16) % 30] += int(digest[8:16], 16) % 100_000
expected = ["day,cents"] + [f"{day},{cents}" for day, cents in enumerate(totals)]
try:
    ok = open("/app/daily.csv").read().splitlines() == expected
    ok = ok and open("/app/answer.txt").read().strip() == str(sum(totals))
except OSError:
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
