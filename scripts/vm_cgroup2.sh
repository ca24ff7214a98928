#!/usr/bin/env bash
# Runs one command on cgroup v2, in a QEMU VM, and exits with its status:
#   scripts/vm_cgroup2.sh -- levelfield run examples/noise-suite --out runs/v2
#   scripts/vm_cgroup2.sh --build      only build the kernel and initramfs (cached)
#
# The guest boots Debian's 6.1 kernel (software emulation: this machine kind's /dev/kvm cannot
# run QEMU) on the host's own root, shared read-only over 9p under an overlay whose writes go to
# guest memory. The checkout is shared read-write at the same path, so what the command writes
# there is on the host afterwards; .venv/bin is on PATH. cgroup2 is mounted with memory, cpu and
# pids enabled; the command starts in a scope cgroup with them delegated, as
# `systemd-run --scope -p Delegate=yes` starts it. stdout and stderr stream to the caller's;
# stdin is /dev/null. CI, LEVELFIELD_* and PYTEST_* variables pass through.
#
# Settings: LEVELFIELD_VM_CPUS (default 2), LEVELFIELD_VM_MEMORY_MB (default 2048).
# Exit 125: the VM itself failed (its console log is printed). Needs root and qemu-system-x86.
set -euo pipefail
checkout="$(cd "$(dirname "$0")/.." && pwd)"
cache=/var/cache/levelfield/vm

build() {
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9  # another checkout may be building the same cache
  python3 "$checkout/scripts/vm/build.py" "$cache"
  exec 9>&-
}

case "${1:-}" in
  --build) build >/dev/null; echo "vm: kernel and initramfs ready in $cache"; exit 0 ;;
  --) shift ;;
  *) sed -n '2,16s/^# \{0,1\}//p' "$0" >&2; exit 2 ;;
esac
(($#)) || { echo "vm: no command after --" >&2; exit 2; }
command -v qemu-system-x86_64 >/dev/null \
  || { echo "vm: qemu-system-x86_64 missing (apt-get install qemu-system-x86)" >&2; exit 125; }

{ read -r kernel; read -r initrd; } < <(build)
control="$(mktemp -d /tmp/levelfield-vm.XXXXXX)"
trap 'rm -rf "$control"' EXIT
trap 'exit 130' INT TERM
printf '%s' "$checkout" > "$control/checkout"
python3 - "$control/request.json" "$checkout" "$@" <<'EOF'
import json, os, sys
env = {k: v for k, v in os.environ.items()
       if k == "CI" or k.startswith(("LEVELFIELD_", "PYTEST_"))}
json.dump({"argv": sys.argv[3:], "cwd": sys.argv[2], "env": env}, open(sys.argv[1], "w"))
EOF

# QEMU writes the command's stdout and stderr to files that `tail` streams to the caller's (a
# reopened /proc/self/fd/1 would not share the caller's file offset); QEMU's own messages and the
# guest's console go to a log, shown only when the VM fails.
touch "$control/stdout" "$control/stderr"
qemu-system-x86_64 \
  -accel tcg -cpu max -smp "${LEVELFIELD_VM_CPUS:-2}" -m "${LEVELFIELD_VM_MEMORY_MB:-2048}" \
  -nodefaults -no-user-config -display none -no-reboot \
  -serial "file:$control/console.log" \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 loglevel=4 panic=-1 mitigations=off" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$checkout,mount_tag=checkout,security_model=passthrough,multidevs=remap" \
  -virtfs "local,path=$control,mount_tag=lfctl,security_model=none" \
  -device virtio-serial-pci \
  -chardev "file,id=out,path=$control/stdout" -device "virtserialport,chardev=out,name=lf.stdout" \
  -chardev "file,id=err,path=$control/stderr" -device "virtserialport,chardev=err,name=lf.stderr" \
  2>>"$control/console.log" &
qemu=$!
trap 'kill "$qemu" 2>/dev/null || true; wait || true; rm -rf "$control"' EXIT
tail -q -s 0.2 -n +1 -f --pid="$qemu" "$control/stdout" &
tail -q -s 0.2 -n +1 -f --pid="$qemu" "$control/stderr" >&2 &
status=0
wait "$qemu" || status=$?
wait || true  # the tails print what is left, then stop

if [ -s "$control/status" ]; then
  exit "$(cat "$control/status")"
fi
echo "vm: the VM ended without the command's status (qemu exit $status); its console:" >&2
tail -n 40 "$control/console.log" >&2
exit 125
