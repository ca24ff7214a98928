#!/usr/bin/env bash
# Prepare this host for the `oci` sandbox backend: podman + runc from Debian, configured for a
# cgroup v1 host whose hard rlimits are lower than podman's defaults, and the Docker Engine API
# served on /run/podman/podman.sock. Idempotent: a second run only checks and (re)starts the service.
#
# Why these settings (measured on Debian bookworm hosts with cgroup v1 and no systemd):
#   - runtime runc: crun refuses hybrid cgroup v1 hosts.
#   - cgroup_manager cgroupfs: there is no systemd to hand cgroups to.
#   - default_ulimits nofile=1024:1024 nproc=4096:4096: podman's defaults exceed the host's hard
#     limits and, without CAP_SYS_RESOURCE, container creation would fail.
#   - events_logger file: there is no journald.
# Usage: scripts/oci_setup.sh [--no-service]
set -euo pipefail

SOCKET=/run/podman/podman.sock
PACKAGES=(podman runc conmon catatonit netavark aardvark-dns slirp4netns uidmap
          debootstrap iptables ca-certificates xz-utils)

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "oci_setup: installing ${missing[*]}"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
        >/dev/null
fi

mkdir -p /etc/containers
cat >/etc/containers/containers.conf.new <<'EOF'
# Written by levelfield scripts/oci_setup.sh
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
init_path = "/usr/bin/catatonit"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[engine.runtimes]
runc = ["/usr/sbin/runc"]
EOF
mv /etc/containers/containers.conf.new /etc/containers/containers.conf

# No registry is reachable: short names resolve to local images only, never to a pull.
if ! grep -qs "levelfield" /etc/containers/registries.conf; then
    cat >/etc/containers/registries.conf <<'EOF'
# Written by levelfield scripts/oci_setup.sh: no registry is reachable from this host.
unqualified-search-registries = ["docker.io"]
short-name-mode = "permissive"
EOF
fi
if [ ! -s /etc/containers/policy.json ]; then
    echo '{"default": [{"type": "insecureAcceptAnything"}]}' >/etc/containers/policy.json
fi

if [ "${1:-}" = "--no-service" ]; then
    exit 0
fi

api_ok() {
    curl -fsS --max-time 2 --unix-socket "$SOCKET" http://d/_ping >/dev/null 2>&1
}
if ! api_ok; then
    mkdir -p "$(dirname "$SOCKET")" /var/log/levelfield
    rm -f "$SOCKET"
    echo "oci_setup: starting podman system service on $SOCKET"
    # From /: conmon writes an empty file named `oom` into the service's working directory
    # whenever a container is OOM-killed, and that must not be the checkout.
    (cd / && exec nohup podman system service --time=0 "unix://$SOCKET" \
        >>/var/log/levelfield/podman-service.log 2>&1 </dev/null) &
    for _ in $(seq 1 100); do
        api_ok && break
        sleep 0.1
    done
fi
api_ok || { echo "oci_setup: the API on $SOCKET did not answer" >&2; exit 1; }
echo "oci_setup: podman $(podman version --format '{{.Server.Version}}' 2>/dev/null) ready on $SOCKET"
