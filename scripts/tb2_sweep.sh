#!/usr/bin/env bash
# The reference solution of every task in a folder of Terminal-Bench 2.0 tasks, built from its
# environment/ and graded, on one container engine; then one row per task. The public task set
# is `terminal-bench-2/` of github.com/yujianll/skill-usage (89 tasks). Resumable: run the same
# command again and only the tasks not yet stored run. Needs scripts/setup.sh test (the engines
# and the stand-in bases); tasks whose base image has no stand-in here fail at build, and are
# stored as infrastructure errors naming the image.
# Usage: scripts/tb2_sweep.sh TASKS OUT [podman|docker]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tasks="${1:?usage: tb2_sweep.sh TASKS OUT [podman|docker]}"
out="${2:?usage: tb2_sweep.sh TASKS OUT [podman|docker]}"
case "${3:-podman}" in
    podman) export DOCKER_HOST=unix:///run/podman/podman.sock ;;
    docker) export DOCKER_HOST=unix://${LEVELFIELD_DOCKER_SOCK:-/run/levelfield-docker.sock} ;;
    *) echo "tb2_sweep: engine is podman or docker, not $3" >&2; exit 2 ;;
esac
"$here/.venv/bin/levelfield" run "$tasks" --out "$out" --agent oracle --policy headroom \
    --backend oci --image build --uv-shim || true   # a task that fails is a row, not the end
"$here/.venv/bin/levelfield" results "$out"
