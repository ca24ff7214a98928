#!/bin/bash
set -euo pipefail
python3 - <<'PY'
a, b = 0, 1
for _ in range(250000):
    a, b = b, (a + b) % 1000000007
open("/app/answer.txt", "w").write(f"{a}\n")
PY
