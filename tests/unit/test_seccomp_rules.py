"""The system-call profile (_seccomp.py), read as rules: what a default Docker container may call,
the same table for the process filter and the engines' JSON, and the one exception the way in of
a process phase needs."""

from __future__ import annotations

import json

from levelfield.sandbox import DEFAULT_CAPABILITIES, _seccomp

REFUSED = (
    "add_key", "keyctl", "request_key", "mount", "umount2", "unshare", "setns", "bpf",
    "perf_event_open", "init_module", "finit_module", "kexec_load", "open_by_handle_at",
    "reboot", "settimeofday", "clock_settime", "syslog", "acct", "swapon", "pivot_root",
    "userfaultfd", "iopl", "fsopen", "move_mount", "quotactl", "lookup_dcookie",
)  # fmt: skip
ALLOWED = ("read", "openat", "execve", "clone", "socket", "ptrace", "chroot", "io_uring_setup")


def names(rules: tuple[_seccomp.Rule, ...]) -> set[str]:
    return {rule.name for rule in rules}


def test_a_default_container_may_not_touch_the_keyring_mount_or_make_namespaces() -> None:
    allowed = names(_seccomp.rules(DEFAULT_CAPABILITIES))
    assert not allowed & set(REFUSED), allowed & set(REFUSED)
    assert set(ALLOWED) <= allowed


def test_clone_may_not_make_a_namespace_and_socket_not_reach_vsock() -> None:
    rules = _seccomp.rules(DEFAULT_CAPABILITIES)
    clone = [r.arg for r in rules if r.name == "clone"]
    assert clone == [(0, "masked_eq", 0x7E020000, 0)]  # CLONE_NEW* flags all zero
    assert [r.arg for r in rules if r.name == "socket"] == [(0, "ne", 40, 0)]
    assert {r.arg[2] for r in rules if r.name == "personality" and r.arg} == {
        0, 8, 0x20000, 0x20008, 0xFFFFFFFF
    }  # fmt: skip


def test_a_capability_adds_its_calls_and_only_the_way_in_gets_setns() -> None:
    assert "chroot" not in names(_seccomp.rules(()))
    assert "open_by_handle_at" in names(_seccomp.rules((*DEFAULT_CAPABILITIES, "dac_read_search")))
    assert "setns" in names(_seccomp.rules(DEFAULT_CAPABILITIES, entering=True))
    assert "setns" not in names(_seccomp.rules(DEFAULT_CAPABILITIES))


def test_the_engines_profile_is_the_same_table_in_dockers_format() -> None:
    profile = json.loads(json.dumps(_seccomp.engine_profile(DEFAULT_CAPABILITIES)))
    assert (profile["defaultAction"], profile["defaultErrnoRet"]) == ("SCMP_ACT_ERRNO", 1)
    plain = set(profile["syscalls"][0]["names"])
    assert plain == {r.name for r in _seccomp.rules(DEFAULT_CAPABILITIES) if r.arg is None}
    clone3 = next(s for s in profile["syscalls"] if s["names"] == ["clone3"])
    assert (clone3["action"], clone3["errnoRet"]) == ("SCMP_ACT_ERRNO", 38)  # ENOSYS: fall back
    args = [s["args"][0] for s in profile["syscalls"] if s["names"] == ["clone"]]
    assert args == [{"index": 0, "value": 0x7E020000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]


def test_the_compiled_filter_is_a_bpf_program_and_the_way_in_differs_by_setns() -> None:
    plain, entering = _seccomp.compiled(entering=False), _seccomp.compiled(entering=True)
    assert len(plain) % 8 == 0 and len(plain) > 8 * 100  # struct sock_filter: 8 bytes each
    assert plain != entering
