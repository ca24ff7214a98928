#!/bin/bash
# Regenerates the data from its seed in memory (no CSV) and solves the normal equations exactly
# with fractions; the answer must agree to 1e-6.
python3 - <<'PY'
import random
from array import array
from fractions import Fraction

n = sx = sy = sxy = sxx = 0
rng = random.Random(1234)
for _ in range(6):
    readings = array("H", rng.randbytes(100_000))
    noise = array("h", rng.randbytes(100_000))
    for x, e in zip(readings, noise):
        y = 3 * x + 7 + e // 64
        n, sx, sy, sxy, sxx = n + 1, sx + x, sy + y, sxy + x * y, sxx + x * x
slope = Fraction(n * sxy - sx * sy, n * sxx - sx * sx)
intercept = (sy - slope * sx) / n
try:
    got = dict(line.split() for line in open("/app/fit.txt") if line.strip())
    ok = (abs(float(got["slope"]) - slope) < 1e-6
          and abs(float(got["intercept"]) - intercept) < 1e-6)
except (OSError, ValueError, KeyError):
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
