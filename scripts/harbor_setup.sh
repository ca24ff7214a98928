#!/usr/bin/env bash
# Harbor (PyPI `harbor`, the Terminal-Bench harness) in its own Python 3.12 virtual environment,
# with levelfield installed into it: what `harbor run -e levelfield.harbor:LevelfieldEnvironment`
# and the Harbor tests need. podman-compose comes along for Harbor's own `-e podman` environment
# (benchmarks/harbor_side_by_side.py).
#   scripts/harbor_setup.sh                            Harbor 0.25.0 in .venv-harbor
#   scripts/harbor_setup.sh 0.26.0 .venv-harbor-0.26   another release in a venv of its own
# Idempotent: a second run only checks (< 2 s). Fresh: ~1-2 min, most of it pip downloading.
set -euo pipefail
cd "$(dirname "$0")/.."
HARBOR_VERSION="${1:-0.25.0}"
VENV="${2:-.venv-harbor}"

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
    echo "harbor_setup: Harbor needs Python >= 3.12 and none was found (python3.12 on PATH," \
         "or pyenv's \$(pyenv root)/versions/3.12.*): install one, e.g. pyenv install 3.12" >&2
    exit 1
  fi
  echo "harbor_setup: $VENV from $python"
  "$python" -m venv "$VENV"
fi
have() { "$VENV/bin/python" -c "import importlib.metadata as m; import sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
if ! have harbor "$HARBOR_VERSION" || ! [ -x "$VENV/bin/podman-compose" ]; then
  echo "harbor_setup: installing harbor==$HARBOR_VERSION and podman-compose"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "harbor==$HARBOR_VERSION" podman-compose
fi
# levelfield without its analysis stack (numpy, scipy, pandas, statsmodels, matplotlib): the
# environment never imports it, and it would triple this install; import and report from .venv.
if ! have levelfield "$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)"; then
  echo "harbor_setup: installing levelfield (editable) and the docker SDK into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e .
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "docker>=7"
fi
echo "harbor_setup: harbor $HARBOR_VERSION ready in $VENV"
