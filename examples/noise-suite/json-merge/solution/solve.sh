#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import json


def merge(base, override):
    out = dict(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


with open("/app/defaults.json") as d, open("/app/overrides.json") as o:
    merged = merge(json.load(d), json.load(o))
with open("/app/merged.json", "w") as out:
    json.dump(merged, out, indent=2, sort_keys=True)
PY
