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

source scripts/venv312.sh
make_venv312 "$VENV" harbor_setup Harbor
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
