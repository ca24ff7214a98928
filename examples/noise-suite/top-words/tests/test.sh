#!/bin/bash
# Counts the generator's byte draws (never the text) and maps them to words through its table.
python3 - <<'PY'
import random
from collections import Counter

WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can out up who them what some into time only other could than then now its two may"
).split()
weights = [max(1, round(52 / (i + 1))) for i in range(len(WORDS))]
weights[0] += 256 - sum(weights)
word_of = [w for w, n in zip(WORDS, weights) for _ in range(n)]
draws = Counter()
for index in range(40):
    draws.update(random.Random(index).randbytes(60_000))
counts = Counter()
for value, n in draws.items():
    counts[word_of[value]] += n
top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]
expected = [f"{word} {count}" for word, count in top]
try:
    ok = open("/app/top10.txt").read().splitlines() == expected
except OSError:
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
