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
# Each step prints `phase: NAME: N s`. Independent steps run side by side: the Debian packages
# first, in one apt-get call; then the venvs (downloads), the VM's kernel, the engines and the
# stand-in bases at once.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/phase.sh
profile="${1:-run}"

packages=(bubblewrap e2fsprogs util-linux procps iproute2 iptables libseccomp2 python3-venv)
if [ "$profile" = test ]; then
  packages+=(chromium docker-registry qemu-system-x86 docker.io patchelf
             podman runc conmon catatonit netavark aardvark-dns slirp4netns uidmap
             debootstrap ca-certificates xz-utils)  # scripts/oci_setup.sh's, in the same call
  command -v npm >/dev/null || packages+=(nodejs npm)
fi
install_packages() {
  local missing=() pkg
  for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  echo "setup: installing ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    >/dev/null
}
install_venv() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  local extras=""
  [ "$profile" = test ] && extras="[dev,oci,ray,agents,inspect,docs]"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras}"
}
phase "setup: Debian packages" install_packages

if [ "$profile" != test ]; then
  phase "setup: .venv" install_venv
  exit 0
fi

# Three venvs of their own (Python 3.12), mostly downloads; the VM's kernel (apt-get download).
phase_start "setup: .venv-harbor (Harbor 0.25)" bash scripts/harbor_setup.sh; harbor_025=$phase_pid
phase_start "setup: .venv-harbor-0.26" bash scripts/harbor_setup.sh 0.26.0 .venv-harbor-0.26
harbor_026=$phase_pid
phase_start "setup: .venv-inspect" bash scripts/inspect_setup.sh; inspect=$phase_pid
phase_start "setup: cgroup v2 VM kernel" bash scripts/vm_cgroup2.sh --build; vm=$phase_pid
phase_start "setup: Docker Engine" bash scripts/docker_setup.sh; docker=$phase_pid
phase "setup: podman" bash scripts/oci_setup.sh
phase "setup: .venv" install_venv
phase "setup: stand-in bases (podman)" bash scripts/offline_bases.sh .venv/bin/python
wait "$docker"
DOCKER_HOST=unix:///run/levelfield-docker.sock \
  phase "setup: stand-in bases (Docker)" bash scripts/offline_bases.sh .venv/bin/python
wait "$harbor_025"; wait "$harbor_026"; wait "$inspect"; wait "$vm"
