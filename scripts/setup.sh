#!/usr/bin/env bash
# Installs what levelfield needs on a Debian host (as root) and the project into .venv.
# Idempotent: a second run only checks. Extra apt packages may be named in LEVELFIELD_APT.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(bubblewrap e2fsprogs util-linux procps python3-venv ${LEVELFIELD_APT:-})
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
