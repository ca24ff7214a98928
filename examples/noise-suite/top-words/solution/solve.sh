#!/bin/bash
# The lean way: count chunk by chunk; only one chunk's words are in memory at a time.
set -euo pipefail
cd /app
python3 - <<'PY'
from collections import Counter

import corpus

counts = Counter()
for chunk in corpus.chunks():
    counts.update(chunk.split())
top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]
with open("/app/top10.txt", "w") as out:
    for word, count in top:
        out.write(f"{word.decode()} {count}\n")
PY
