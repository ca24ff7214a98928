#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import string

cipher = open("/app/message.txt").read()
lower, upper = string.ascii_lowercase, string.ascii_uppercase


def unshift(text, k):
    table = str.maketrans(lower + upper, lower[k:] + lower[:k] + upper[k:] + upper[:k])
    return text.translate(table)


# The shift whose output has the most common English words wins.
common = {"the", "and", "is", "of", "a", "to", "as"}
best = max(range(26), key=lambda k: sum(w in common for w in unshift(cipher, k).lower().split()))
open("/app/plain.txt", "w").write(unshift(cipher, best))
PY
