#!/usr/bin/env bash
# Sets up levelfield on a Debian host, as root, into .venv. Idempotent: a second run only checks.
#   scripts/setup.sh          what `levelfield run/sweep/report` need (process backend)
#   scripts/setup.sh test     plus what the test suite exercises for real: Chromium (HTML
#                             report), podman + runc and the Docker Engine + stand-in base
#                             images (oci backend), the image registry (docker-registry), Ray,
#                             the model SDKs, Node.js (a CLI agent installed with npm), and QEMU
#                             with a kernel for the cgroup v2 VM (scripts/vm_cgroup2.sh),
#                             Harbor 0.25 and 0.26 in .venv-harbor and .venv-harbor-0.26
#                             (scripts/harbor_setup.sh), and Inspect with inspect-harbor in
#                             .venv-inspect (scripts/inspect_setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${1:-run}"

packages=(bubblewrap e2fsprogs util-linux procps iproute2 iptables libseccomp2 python3-venv)
if [ "$profile" = test ]; then
  packages+=(chromium docker-registry qemu-system-x86)
  command -v npm >/dev/null || packages+=(nodejs npm)
fi
missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
extras=""
[ "$profile" = test ] && extras="[dev,oci,ray,agents,inspect]"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras}"

if [ "$profile" = test ]; then
  # three venvs of their own (Python 3.12), made while the engines and bases are set up: ~2-4
  # min the first time (mostly downloads), <1 s after
  bash scripts/harbor_setup.sh & harbor_025=$!   # Harbor 0.25 in .venv-harbor
  bash scripts/harbor_setup.sh 0.26.0 .venv-harbor-0.26 & harbor_026=$!  # its newest release
  bash scripts/inspect_setup.sh & inspect=$!     # inspect-ai + inspect-harbor in .venv-inspect
  bash scripts/oci_setup.sh           # podman, runc, its API socket (~10-30 s fresh, <1 s after)
  bash scripts/offline_bases.sh .venv/bin/python  # stand-in bases: ~5 min once, then cached
  bash scripts/docker_setup.sh        # the Docker Engine beside podman (~20 s fresh, <1 s after)
  DOCKER_HOST=unix:///run/levelfield-docker.sock \
    bash scripts/offline_bases.sh .venv/bin/python  # the same bases in Docker (cached: ~15 s)
  bash scripts/vm_cgroup2.sh --build  # the cgroup v2 VM's kernel + initramfs: ~20 s once, cached
  wait "$harbor_025"; wait "$harbor_026"; wait "$inspect"
fi
