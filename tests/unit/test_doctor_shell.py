"""Reading what an agent's shell holds from what it printed (doctor.py): masks against the
kernel's numbering, checked on the sets Docker, Podman and a host root give."""

from __future__ import annotations

from levelfield.doctor import capability_names, read_shell

DOCKER_DEFAULT = 0x00000000A80425FB  # `docker run debian grep CapEff /proc/self/status`
PODMAN_DEFAULT = 0x00000000800405FB  # podman 4's default, without mknod, net_raw, audit_write
HOST_ROOT = 0x000001FFFEFFFFFF  # what nsenter left an agent's shell holding
GRANTED = DOCKER_DEFAULT & ~(1 << 13)  # what levelfield's oci agent holds: Docker's less net_raw


def test_capability_names_follow_the_kernel_numbering() -> None:
    assert capability_names(DOCKER_DEFAULT) == [
        "chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
        "net_bind_service", "net_raw", "sys_chroot", "mknod", "audit_write", "setfcap",
    ]  # fmt: skip
    assert set(capability_names(PODMAN_DEFAULT)) < set(capability_names(DOCKER_DEFAULT))
    assert len(capability_names(HOST_ROOT)) == 40  # every one but sys_resource, bit 24


FILTERED = "Seccomp:\t2\nSeccomp_filters:\t1\n"


def test_the_granted_set_is_green_and_host_root_is_not() -> None:
    ok = read_shell(f"CapEff:\t{GRANTED:016x}\nNoNewPrivs:\t1\n{FILTERED}4:memory:/\n")
    assert ok.ok and "(Docker's default set less net_raw); " in ok.detail
    assert "namespace its own" in ok.detail and "seccomp filter (1 filter)" in ok.detail
    raw = read_shell(f"CapEff:\t{DOCKER_DEFAULT:016x}\nNoNewPrivs:\t1\n{FILTERED}4:memory:/\n")
    assert not raw.ok and "BEYOND levelfield's set: net_raw" in raw.detail
    podman = read_shell(f"CapEff:\t{PODMAN_DEFAULT:016x}\nNoNewPrivs:\t1\n{FILTERED}0::/\n")
    assert podman.ok and "less net_raw, mknod, audit_write" in podman.detail
    root = read_shell(
        f"CapEff:\t{HOST_ROOT:016x}\nNoNewPrivs:\t0\nSeccomp:\t0\n4:memory:/levelfield/x\n"
    )
    assert not root.ok
    assert "BEYOND levelfield's set: dac_read_search, linux_immutable" in root.detail
    assert "sys_admin" in root.detail and "no-new-privileges OFF" in root.detail
    assert "the host one" in root.detail and "seccomp OFF" in root.detail
    assert not read_shell(f"CapEff:\t{GRANTED:016x}\nNoNewPrivs:\t0\n{FILTERED}").ok
    unfiltered = read_shell(f"CapEff:\t{GRANTED:016x}\nNoNewPrivs:\t1\nSeccomp:\t0\n")
    assert not unfiltered.ok and "seccomp OFF" in unfiltered.detail
    assert not read_shell("bash: grep: command not found").ok
