#!/usr/bin/env bash
# Build (or find cached) the stand-in base images and the uv shim for the `oci` backend:
# python:3.13-slim-bookworm, ubuntu:24.04 and debian:bookworm-slim, from Debian's archive.
# First run on a machine: ~5-10 min (CPython is compiled once); later runs: seconds.
# The slow parts are cached in ${LEVELFIELD_CACHE_DIR:-/var/cache/levelfield}.
# Usage: scripts/offline_bases.sh [PYTHON]   (default: the project's .venv python)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-$here/.venv/bin/python}"
exec "$python" -c '
from levelfield.sandbox.oci import build_offline_bases
for stand_in in build_offline_bases():
    how = "cached" if stand_in.cached else "built"
    print(f"offline-bases: {stand_in.tag}: {stand_in.description} ({how})")
'
