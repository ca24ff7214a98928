#!/usr/bin/env bash
# Start the Docker Engine (Debian's docker.io) beside podman, for the `oci` backend and its tests.
# Idempotent: a second run only checks that the engine answers. Prints the DOCKER_HOST to use.
#
# Why these settings (measured on Debian bookworm hosts with cgroup v1 and no systemd):
#   - its own socket, data root and exec root: it must not disturb another engine's /var/run/docker.sock;
#   - --iptables=false --ip-masq=false --bridge=none: no iptables NAT here, so there is no default
#     bridge network. Trial containers never use the engine's networks anyway: they start with
#     `none`, and levelfield attaches its own sealed link when a task has network. Builds use the
#     host's network.
# Usage: scripts/docker_setup.sh     (env LEVELFIELD_DOCKER_SOCK overrides the socket path)
set -euo pipefail

SOCKET="${LEVELFIELD_DOCKER_SOCK:-/run/levelfield-docker.sock}"
ROOT=/var/lib/levelfield-docker
EXEC_ROOT=/run/levelfield-docker
LOG=/var/log/levelfield/dockerd.log

if ! command -v dockerd >/dev/null; then
    echo "docker_setup: installing docker.io"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >/dev/null
fi

api_ok() {
    curl -fsS --max-time 2 --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1
}
mkdir -p /var/log/levelfield "$ROOT" "$EXEC_ROOT"
exec 9>"$EXEC_ROOT.lock"
flock 9  # two setups at once must not start two daemons on one data root
if ! api_ok; then
    rm -f "$SOCKET"
    echo "docker_setup: starting dockerd on $SOCKET"
    (cd / && exec nohup dockerd --host "unix://$SOCKET" --data-root "$ROOT" \
        --exec-root "$EXEC_ROOT" --pidfile "$EXEC_ROOT/dockerd.pid" --iptables=false \
        --ip-masq=false --bridge=none \
        >>"$LOG" 2>&1 </dev/null 9>&-) &  # from /; the daemon must not inherit the lock
    for _ in $(seq 1 300); do
        api_ok && break
        sleep 0.1
    done
fi
api_ok || { echo "docker_setup: dockerd did not answer on $SOCKET; see $LOG" >&2; tail -20 "$LOG" >&2; exit 1; }
version=$(curl -fsS --unix-socket "$SOCKET" http://d/version | sed -n 's/.*"Version":"\([^"]*\)".*/\1/p' | head -1)
echo "docker_setup: Docker Engine ${version} ready: DOCKER_HOST=unix://$SOCKET"
