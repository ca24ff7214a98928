"""Readers of the kernel's health and network counters, and the index probe's configuration:
the file formats as the kernel documents them, parsed by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield.health import (
    HealthSnapshot,
    health_between,
    parse_cpu_ticks,
    parse_pressure,
    read_pressures,
)
from levelfield.network import configured_index, parse_net_dev, without_credentials

# Documentation/accounting/psi.rst
CPU_PSI = "some avg10=1.50 avg60=0.80 avg300=0.10 total=2000000\n"
MEMORY_PSI = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=100\n"
    "full avg10=0.25 avg60=0.00 avg300=0.00 total=50\n"
)
NET_DEV = "\n".join(
    [
        "Inter-|   Receive                      |  Transmit",
        " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets ...",
        "    lo:  999999  100 0 0 0 0 0 0   999999 100 0 0 0 0 0 0",
        "  eth0: 3153173 2100 0 0 0 0 0 0     7175  90 0 0 0 0 0 0",
        "  eth1:     100    1 0 0 0 0 0 0       50   1 0 0 0 0 0 0",
    ]
)


def test_pressure_lines_and_missing_full() -> None:
    cpu = parse_pressure(CPU_PSI)
    assert cpu is not None and cpu.some.avg10 == 1.5 and cpu.some.total_us == 2_000_000
    assert cpu.full is None
    memory = parse_pressure(MEMORY_PSI)
    assert memory is not None and memory.full is not None and memory.full.total_us == 50
    assert parse_pressure("") is None


def test_health_between_two_snapshots(tmp_path: Path) -> None:
    (tmp_path / "cpu.pressure").write_text(CPU_PSI)
    (tmp_path / "memory.pressure").write_text(MEMORY_PSI)
    files = {r: tmp_path / f"{r}.pressure" for r in ("cpu", "memory")}
    before = read_pressures(files)
    (tmp_path / "cpu.pressure").write_text(CPU_PSI.replace("2000000", "2500000"))
    after = read_pressures(files)
    start = HealthSnapshot(10.0, cgroup=before, cpu_ticks=(100, 10_000))
    end = HealthSnapshot(12.0, cgroup=after, cpu_ticks=(150, 10_400))
    health = health_between(start, end, admission_wait_s=1.23456)
    cpu = health.cgroup_pressure["cpu"]
    assert cpu.some_stall_s == pytest.approx(0.5) and cpu.over_s == pytest.approx(2.0)
    assert health.cgroup_pressure["memory"].full_stall_s == 0.0
    assert health.steal_share == pytest.approx(50 / 400)
    assert health.admission_wait_s == pytest.approx(1.2346)
    assert health.host_pressure == {}


def test_cpu_ticks_take_steal_from_the_eighth_column() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    assert parse_cpu_ticks("cpu  10 0 5 80 1 0 1 3 7 0\ncpu0 1 2 3\n") == (3, 100)
    assert parse_cpu_ticks("intr 1 2\n") is None


def test_net_dev_sums_every_interface_but_loopback() -> None:
    counters = parse_net_dev(NET_DEV)
    assert (counters.rx_bytes, counters.tx_bytes) == (3153273, 7225)
    assert (counters.rx_packets, counters.tx_packets) == (2101, 91)


def test_index_comes_from_pip_configuration(tmp_path: Path) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\n")
    assert configured_index({"PIP_CONFIG_FILE": str(conf)}) == "https://mirror.example/simple"
    env = {"PIP_CONFIG_FILE": str(conf), "PIP_INDEX_URL": "http://127.0.0.1:1/simple/"}
    assert configured_index(env) == "http://127.0.0.1:1/simple/"


def test_credentials_never_leave_the_index_url() -> None:
    url = "https://user:s3cret@pypi.corp.example:8443/simple/"
    shown = without_credentials(url)
    assert "s3cret" not in shown and "user" not in shown
    assert shown == "https://pypi.corp.example:8443/simple/"
    assert without_credentials("https://pypi.org/simple/") == "https://pypi.org/simple/"
