#!/bin/busybox sh
# PID 1 of the cgroup v2 VM's initramfs (busybox). Loads the drivers the kernel keeps as modules,
# builds the root — the host's own root over 9p, read-only, under an overlay whose writes go to a
# tmpfs — mounts the checkout (read-write, same path as on the host) and the control share, mounts
# cgroup2 with memory, cpu and pids enabled, then hands over to scripts/vm/guest.py as PID 1.
/bin/busybox --install -s /bin
export PATH=/bin

fail() {
  echo "vm-init: $*" >&2
  [ -d /ctl ] && echo "vm-init: $*" > /ctl/failed
  sync
  poweroff -f
}

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for module in $(cat /modules.load); do
  insmod "/lib/modules/$module" || fail "insmod $module"
done

# 9p2000.L over virtio; a large msize cuts round trips, the slow part under emulation.
p9="trans=virtio,version=9p2000.L,msize=524288"
mkdir -p /ctl /lower /rw /newroot
mount -t 9p -o "$p9,cache=none" lfctl /ctl || fail "mount of the control share"
checkout=$(cat /ctl/checkout)
# cache=loose: the host's root does not change under a VM that lives for one command.
mount -t 9p -o "$p9,ro,cache=loose" hostroot /lower || fail "mount of the host's root"
mount -t tmpfs -o mode=755 rw /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot \
  || fail "overlay over the host's root"

mount -t proc proc /newroot/proc
mount -t sysfs sys /newroot/sys
mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
mount -t tmpfs -o mode=1777 tmp /newroot/tmp
mount -t tmpfs -o mode=755 run /newroot/run
mkdir -p /newroot/run/levelfield-vm
mount --move /ctl /newroot/run/levelfield-vm
# After the tmpfs mounts, on a mount point made now: a checkout under /tmp or /run (a fresh clone
# in /tmp/...) lives where the guest has just mounted an empty tmpfs.
# cache=loose here too: writes go straight through to the host (write-through before 6.6).
mkdir -p "/newroot$checkout" || fail "making the mount point $checkout"
mount -t 9p -o "$p9,cache=loose" checkout "/newroot$checkout" || fail "mount of $checkout"

cg=/newroot/sys/fs/cgroup
mount -t cgroup2 -o nsdelegate cgroup2 "$cg" || fail "cgroup2 mount"
echo "+memory +cpu +pids" > "$cg/cgroup.subtree_control" || fail "enabling controllers"

exec switch_root /newroot /usr/bin/python3 "$checkout/scripts/vm/guest.py"
