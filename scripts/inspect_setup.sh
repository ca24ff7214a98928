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

find_python312() {  # pyenv's shim may exist without 3.12 being selected: try each for real
  local root candidate
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
  for candidate in $(ls -d "$root"/versions/3.1[2-9].*/bin/python 2>/dev/null | sort -V) \
                   python3.12 python3.13; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
}

if [ ! -x "$VENV/bin/python" ]; then
  python=$(find_python312)
  if [ -z "$python" ]; then
    echo "inspect_setup: inspect-harbor needs Python >= 3.12 and none was found (python3.12 on" \
         "PATH, or pyenv's \$(pyenv root)/versions/3.12.*): install one, e.g. pyenv install 3.12" >&2
    exit 1
  fi
  echo "inspect_setup: $VENV from $python"
  "$python" -m venv "$VENV"
fi
have() { "$VENV/bin/python" -c "import importlib.metadata as m; import sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
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
