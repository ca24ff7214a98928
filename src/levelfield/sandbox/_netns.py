"""A trial's own network: a network namespace, a veth pair to the host, NAT out, and nothing else.

Why its own: a trial that shares the host's network namespace shares its counters too, so the
bytes a trial downloaded could not be told from everything else the host moved. In its own
namespace, `/proc/PID/net/dev` of any process in it counts the trial's traffic alone (the meter,
`network.py`, reads it). On `process` the namespace is made here (`create`); on `oci` it is the
container's, started with the engine's `none` network, and the same link is attached to it
(`attach`), so both engines and the process backend seal a trial the same way, whatever the
engine's own networking (Docker without iptables has no bridge at all).

Sealed: a trial reaches the outside network through the host's default route and nothing else.
Its packets to any of the host's own addresses (the gateway of its /30, the host's public
address, an engine's bridge address: every local address goes through INPUT) are refused, and so
is forwarding to any interface but the default route's: another trial's link, an engine's bridge,
the host's other networks. Link-local destinations (169.254/16: the other trials' /30s, a cloud's
metadata service) are refused even out of the default route. Nothing from outside reaches the
trial but the answers to its own connections. A host without a default route gives a trial no
outside network at all. The model proxy and the egress relay need none of this: their sockets are
made inside the trial's namespace, on its loopback.

Layout of one trial (names derived from the run and trial ids, so `reap` finds exactly what a
killed run left): namespace `lf-<run>-<trial>` under /run/netns; host end `lfh<hash>` with the
first address of a /30 from SUBNET_POOL; trial end renamed `eth0` with the second address and a
default route through the host end; a MASQUERADE rule and the filter rules above, each tagged
with the comment `levelfield:<run>:<trial>`. IPv6 is off inside, so router solicitations do not
count as traffic (and no IPv6 path bypasses the IPv4 rules). Addresses are link-local
(169.254/16, away from the cloud metadata address), so they do not collide with the private
ranges a host's own networks use.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from levelfield.errors import HostUnsupported, SandboxStartError

NETNS_DIR = Path("/run/netns")
NAME_PREFIX = "lf-"
TAG_PREFIX = "levelfield:"
# 4096 /30 blocks; 169.254.169.254 (cloud metadata) lies outside, in 169.254.128.0/18.
SUBNET_POOL = ipaddress.ip_network("169.254.192.0/18")
LOCK_PATH = Path("/run/levelfield/netns.lock")  # one allocator across every harness on the host
IP_FORWARD = Path("/proc/sys/net/ipv4/ip_forward")
COMMAND_TIMEOUT_S = 30.0
_COMMENT = re.compile(r'--comment "?([^" ]+)"?')
TOOLS = (("ip", "iproute2"), ("iptables", "iptables"), ("iptables-restore", "iptables"))


@dataclass(frozen=True, slots=True)
class TrialNetwork:
    name: str
    host_if: str
    host_addr: str
    trial_addr: str
    subnet: str
    tag: str
    uplinks: tuple[str, ...] = ()  # the default route's interfaces: the only way out

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def enter_argv(self) -> list[str]:
        """Prefix that runs a command inside this namespace (the bwrap init, then its phases)."""
        return ["nsenter", f"--net={self.path}", "--"]


def problems() -> list[str]:
    return [
        f"{tool} not found on PATH (Debian: apt-get install {pkg})"
        for tool, pkg in TOOLS
        if shutil.which(tool) is None
    ]


def namespace_name(run_id: str, trial_id: str) -> str:
    return f"{NAME_PREFIX}{run_id}-{trial_id}"


def _host_if(name: str) -> str:
    """Interface names hold 15 bytes: a hash of the namespace name keeps them short and unique."""
    return "lfh" + hashlib.sha256(name.encode()).hexdigest()[:10]


def create(run_id: str, trial_id: str) -> TrialNetwork:
    """The namespace, its veth pair, route, NAT and seal; SandboxStartError (nothing left) on
    failure."""
    return _made(run_id, trial_id, pid=None)


def attach(run_id: str, trial_id: str, pid: int) -> TrialNetwork:
    """The same link, attached to the namespace process `pid` already has (a container started
    with the engine's `none` network); the namespace itself goes with the container."""
    return _made(run_id, trial_id, pid=pid)


def _made(run_id: str, trial_id: str, *, pid: int | None) -> TrialNetwork:
    missing = problems()
    if missing:
        raise HostUnsupported("a trial with network needs " + "; ".join(missing))
    name = namespace_name(run_id, trial_id)
    tag = f"{TAG_PREFIX}{run_id}:{trial_id}"
    with _allocation_lock():
        if (NETNS_DIR / name).exists():
            _remove(name, tag)  # a half-made namespace of a killed earlier attempt
        subnet = _free_subnet(_used_addresses(), name)
        hosts = list(subnet.hosts())
        net = TrialNetwork(
            name, _host_if(name), str(hosts[0]), str(hosts[1]), str(subnet), tag, uplinks()
        )
        try:
            _build(net, pid)
        except BaseException:
            _remove(name, tag)
            raise
    return net


def uplinks() -> tuple[str, ...]:
    """The interfaces of the host's IPv4 default routes: where a trial's traffic may leave."""
    out = _run(["ip", "-4", "-o", "route", "show", "default"], check=False) or ""
    found = []
    for line in out.splitlines():
        parts = line.split()
        if "dev" in parts and parts.index("dev") + 1 < len(parts):
            found.append(parts[parts.index("dev") + 1])
    return tuple(dict.fromkeys(found))


def destroy(net: TrialNetwork) -> None:
    """The rules this trial added, deleted as written (one call); a scan only if that fails."""
    _run(["ip", "-force", "-batch", "-"], stdin=_unlink_script(net.name), check=False)
    deleted = _run(["iptables-restore", "-w", "--noflush"], stdin=_rules(net, "-D"), check=False)
    if deleted is None and shutil.which("iptables-save"):
        _delete_rules(net.tag)


def reap(run_id: str) -> int:
    """Namespaces, veths and NAT rules of `run_id` that a dead harness left; returns the count."""
    prefix = namespace_name(run_id, "")
    names = sorted(p.name for p in NETNS_DIR.glob(f"{prefix}*")) if NETNS_DIR.is_dir() else []
    for name in names:
        _remove(name, f"{TAG_PREFIX}{run_id}:{name[len(prefix):]}")
    if shutil.which("iptables-save"):
        _delete_rules(f"{TAG_PREFIX}{run_id}:", prefix=True)  # rules left without a namespace
    return len(names)


def _build(net: TrialNetwork, pid: int | None = None) -> None:
    """Four commands: the host side, the trial side, IPv6 off inside, the rules. With `pid`, the
    namespace is that process's, named for `ip` by `netns attach`."""
    trial_if = "lfn" + net.host_if[3:]
    outside = [
        f"netns attach {net.name} {pid}" if pid else f"netns add {net.name}",
        f"link add {net.host_if} type veth peer name {trial_if} netns {net.name}",
        f"addr add {net.host_addr}/30 dev {net.host_if}",
        f"link set {net.host_if} up",
    ]
    inside = [
        f"link set {trial_if} name eth0",
        f"addr add {net.trial_addr}/30 dev eth0",
        "link set eth0 up",
        "link set lo up",
        f"route add default via {net.host_addr}",
    ]
    _run(["ip", "-batch", "-"], stdin="\n".join(outside) + "\n")
    _run(["ip", "-n", net.name, "-batch", "-"], stdin="\n".join(inside) + "\n")
    _run([*net.enter_argv(), "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
          "net.ipv6.conf.default.disable_ipv6=1"])
    _enable_forwarding()
    _run(["iptables-restore", "-w", "--noflush"], stdin=_rules(net, "-I"))


def _rules(net: TrialNetwork, verb: str) -> str:
    """The trial's rules, to insert (-I) or delete (-D) in one iptables-restore. Inserted, each
    goes first in its chain, so they are written in reverse: the chain then reads as listed in
    `_filter_rules`, ahead of whatever else the host has there."""
    comment = f'-m comment --comment "{net.tag}"'
    nat_verb = "-A" if verb == "-I" else "-D"
    ordered = _filter_rules(net)
    rules = reversed(ordered) if verb == "-I" else iter(ordered)
    return "\n".join([
        "*nat",
        f"{nat_verb} POSTROUTING -s {net.subnet} ! -o {net.host_if} {comment} -j MASQUERADE",
        "COMMIT",
        "*filter",
        *(f"{verb} {chain} {match} {comment} -j {target}" for chain, match, target in rules),
        "COMMIT",
    ]) + "\n"


LINK_LOCAL = "169.254.0.0/16"  # the trial pool and the cloud metadata address
# Said at once, not left to time out: a TCP connection is reset, anything else gets an ICMP
# error (which the kernel rate-limits, so TCP, the common case, is not left to it).
REFUSED = (
    ("-p tcp", "REJECT --reject-with tcp-reset"),
    ("", "REJECT --reject-with icmp-admin-prohibited"),
)


def _filter_rules(net: TrialNetwork) -> list[tuple[str, str, str]]:
    """(chain, match, target), top to bottom: the host's own addresses refused, out only through
    the default route and never to a link-local address, in only as an answer."""
    h = net.host_if
    return [
        *_refused("INPUT", f"-i {h}"),
        *_refused("FORWARD", f"-i {h} -d {LINK_LOCAL}"),
        *(("FORWARD", f"-i {h} -o {up}", "ACCEPT") for up in net.uplinks),
        *_refused("FORWARD", f"-i {h}"),
        ("FORWARD", f"-o {h} -m conntrack --ctstate ESTABLISHED,RELATED", "ACCEPT"),
        ("FORWARD", f"-o {h}", "DROP"),
    ]


def _refused(chain: str, match: str) -> list[tuple[str, str, str]]:
    return [(chain, f"{match} {protocol}".strip(), target) for protocol, target in REFUSED]


def _unlink_script(name: str) -> str:
    """Deleting the host end deletes its peer; the namespace goes once nothing holds it."""
    lines = [f"link del {_host_if(name)}"]
    if (NETNS_DIR / name).exists():
        lines.append(f"netns del {name}")
    return "\n".join(lines) + "\n"


def _enable_forwarding() -> None:
    """NAT needs the host to forward; container engines turn it on the same way."""
    with contextlib.suppress(OSError):
        if IP_FORWARD.read_text().strip() != "1":
            IP_FORWARD.write_text("1")


def _remove(name: str, tag: str) -> None:
    """Idempotent, for leftovers whose rules are not known: each part may already be gone."""
    _run(["ip", "-force", "-batch", "-"], stdin=_unlink_script(name), check=False)
    if shutil.which("iptables-save"):
        _delete_rules(tag)


def _delete_rules(tag: str, *, prefix: bool = False) -> None:
    """Every rule whose comment is `tag` (or starts with it), in the nat and filter tables."""
    for table in ("nat", "filter"):
        saved = _run(["iptables-save", "-t", table], check=False) or ""
        deletions = []
        for line in saved.splitlines():
            found = _COMMENT.search(line) if line.startswith("-A ") else None
            comment = found.group(1) if found else ""
            if comment == tag or (prefix and comment.startswith(tag)):
                deletions.append("-D" + line[2:])
        if deletions:
            script = "\n".join([f"*{table}", *deletions, "COMMIT"]) + "\n"
            _run(["iptables-restore", "-w", "--noflush"], stdin=script, check=False)


def _used_addresses() -> set[ipaddress.IPv4Network]:
    out = _run(["ip", "-4", "-o", "addr", "show"], check=False) or ""
    used = set()
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            iface = ipaddress.ip_interface(parts[parts.index("inet") + 1])
            used.add(ipaddress.ip_network(f"{iface.ip}/30", strict=False))
    return used


def _free_subnet(used: set[ipaddress.IPv4Network], name: str) -> ipaddress.IPv4Network:
    """The first /30 of the pool not in use, searched from a point the name hashes to."""
    blocks = list(SUBNET_POOL.subnets(new_prefix=30))
    start = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % len(blocks)
    for i in range(len(blocks)):
        block = blocks[(start + i) % len(blocks)]
        if block not in used:
            return block
    raise SandboxStartError(f"no free /30 left in {SUBNET_POOL} for a trial network")


@contextlib.contextmanager
def _allocation_lock() -> Iterator[None]:
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _run(argv: list[str], *, stdin: str | None = None, check: bool = True) -> str | None:
    """stdout; on failure SandboxStartError, or None when `check` is off."""
    try:
        proc = subprocess.run(
            argv,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        if check:
            raise SandboxStartError(f"trial network: {' '.join(argv[:4])}: {exc}") from exc
        return None
    if proc.returncode != 0:
        if not check:
            return None
        detail = proc.stderr.strip()[-300:]
        raise SandboxStartError(f"trial network: {' '.join(argv[:5])} failed: {detail}")
    return proc.stdout
