#!/bin/bash
# Fast doubling: F(2k) = F(k)(2F(k+1) - F(k)), F(2k+1) = F(k)^2 + F(k+1)^2 — not the loop.
expected=$(python3 -c '
M = 1000000007
def fib(n):
    if n == 0:
        return 0, 1
    a, b = fib(n // 2)
    c, d = a * (2 * b - a) % M, (a * a + b * b) % M
    return (d, (c + d) % M) if n % 2 else (c, d)
print(fib(250000)[0])')
if [ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
