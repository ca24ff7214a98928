#!/usr/bin/env bash
# Inspect AI (PyPI `inspect-ai`) with `inspect-harbor`, which runs Harbor tasks (Terminal-Bench 2.0
# among them) inside Inspect, in their own virtual environment, .venv-inspect, with levelfield
# installed into it: what `inspect eval ... --sandbox levelfield:...` and the Inspect tests need.
# inspect-harbor needs Python >= 3.12 (Inspect itself, and levelfield's sandbox for it, run on
# 3.11: .venv has the `inspect` extra too, for `levelfield import inspect`).
# Idempotent: a second run only checks (< 2 s). Fresh: ~1 min, most of it pip downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
INSPECT_VERSION=0.3.285
INSPECT_HARBOR_VERSION=1.0.0
VENV=.venv-inspect

source scripts/venv312.sh
make_venv312 "$VENV" inspect_setup inspect-harbor
if ! have inspect-ai "$INSPECT_VERSION" || ! have inspect-harbor "$INSPECT_HARBOR_VERSION"; then
  echo "inspect_setup: installing inspect-ai==$INSPECT_VERSION and inspect-harbor==$INSPECT_HARBOR_VERSION"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "inspect-ai==$INSPECT_VERSION" "inspect-harbor==$INSPECT_HARBOR_VERSION" "docker>=7"
fi
# levelfield without its analysis stack, as in .venv-harbor: the sandbox never imports it.
# Installed editable, its entry point is how Inspect finds the `levelfield` sandbox.
registered() { "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(not any(e.name == 'levelfield' for e in m.entry_points(group='inspect_ai')))" 2>/dev/null; }
if ! have levelfield "$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)" || ! registered; then
  echo "inspect_setup: installing levelfield (editable) into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
fi
echo "inspect_setup: inspect-ai $INSPECT_VERSION and inspect-harbor $INSPECT_HARBOR_VERSION ready in $VENV"
