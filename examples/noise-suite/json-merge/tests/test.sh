#!/bin/bash
# The inputs must be the ones shipped (an agent could rewrite them to match its own answer).
sha256sum -c --quiet <<'SUMS' || { echo 0 > /logs/verifier/reward.txt; exit 0; }
b24849147fea7ab4ea7da5129a08b8368f5d7468a8e1cb0bcff211a8fa74186d  /app/defaults.json
7352e5cae37522e45724b0b0c9bb19723553000737890768340fcd6297b80d78  /app/overrides.json
SUMS
# An independent merge (flattened dotted paths), compared with the parsed result.
python3 - <<'PY'
import json


def flatten(obj, prefix=""):
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from flatten(value, path + ".")
        else:
            yield path, value


def expected():
    defaults = dict(flatten(json.load(open("/app/defaults.json"))))
    for path, value in flatten(json.load(open("/app/overrides.json"))):
        # an override replaces the whole subtree below its path
        defaults = {p: v for p, v in defaults.items() if not p.startswith(path + ".")}
        if value is None:
            defaults.pop(path, None)
        else:
            defaults[path] = value
    return defaults


try:
    got = dict(flatten(json.load(open("/app/merged.json"))))
    ok = got == expected()
except (OSError, ValueError):
    ok = False
open("/logs/verifier/reward.txt", "w").write("1\n" if ok else "0\n")
PY
