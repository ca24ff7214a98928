"""Parsing of /proc and cgroup files, on the formats the kernel writes (v2 cannot be exercised
on a v1 host, so its counters are read from files laid out as the kernel lays them out; the real
v2 runs in the VM of tests/integration/test_cgroup2_vm.py)."""

from pathlib import Path

import pytest

from levelfield.sandbox import cgroups
from levelfield.sandbox.cgroups import CgroupHost, TrialCgroup, _own_paths, _v1_mounts

PROC_CGROUP_V1 = """9:name=systemd:/
8:pids:/
4:memory:/process_api/abc
2:cpu,cpuacct:/
0::/
"""
PROC_MOUNTS = """cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""


def test_own_paths_and_joint_v1_mounts() -> None:
    own = _own_paths(PROC_CGROUP_V1)
    assert own["memory"] == "/process_api/abc" and own["cpuacct"] == "/" and own[""] == "/"
    mounts = _v1_mounts(PROC_MOUNTS)
    assert mounts["cpu"] == mounts["cpuacct"] == Path("/sys/fs/cgroup/cpu,cpuacct")
    assert "unified" not in {p.name for p in mounts.values()}


def test_v2_counters_are_read_from_the_kernels_files(tmp_path: Path) -> None:
    host = CgroupHost(2, {"unified": tmp_path})
    cgroup = TrialCgroup(host, "run", "trial")
    d = cgroup.dirs["unified"]
    d.mkdir(parents=True)
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 17\noom 2\noom_kill 2\noom_group_kill 0\n")
    (d / "memory.peak").write_text("104857600\n")
    (d / "memory.current").write_text("4096\n")
    (d / "pids.events").write_text("max 5\n")
    (d / "cpu.stat").write_text(
        "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
        "nr_periods 40\nnr_throttled 12\nthrottled_usec 750000\n"
    )
    counters = cgroup.counters()
    assert (counters.oom_kills, counters.memory_failcnt, counters.pids_max_hits) == (2, 17, 5)
    assert counters.memory_peak_bytes == 100 << 20
    assert (counters.cpu_nr_periods, counters.cpu_throttled_periods) == (40, 12)
    assert counters.cpu_throttled_s == 0.75 and counters.cpu_usage_s == 2.5
    assert cgroup.usage().memory_bytes == 4096
    assert cgroup.procs_files() == [d / "cgroup.procs"]


def test_v1_trial_dirs_nest_under_each_controllers_own_cgroup(tmp_path: Path) -> None:
    host = CgroupHost(
        1,
        {
            "memory": tmp_path / "memory/process_api/abc",
            "cpu": tmp_path / "cpu",
            "cpuacct": tmp_path / "cpu",
            "pids": tmp_path / "pids",
        },
    )
    cgroup = TrialCgroup(host, "run1", "t1")
    assert cgroup.dirs["memory"] == tmp_path / "memory/process_api/abc/levelfield/run1/t1"
    assert len(cgroup.procs_files()) == 3  # cpu and cpuacct share one hierarchy here


def _levels(root: Path, lows: dict[str, str]) -> Path:
    for rel, low in lows.items():
        (root / rel).mkdir(parents=True, exist_ok=True)
        (root / rel / "memory.low").write_text(f"{low}\n")
    return root / max(lows, key=len)


@pytest.mark.parametrize(
    ("lows", "options", "gap"),
    [
        (
            {"a.slice": "0", "a.slice/b.scope": "max"},
            "rw,nsdelegate,memory_recursiveprot",
            "a.slice",
        ),
        ({"a.slice": "1048576", "a.slice/b.scope": "0"}, "rw,nsdelegate", "a.slice/b.scope"),
        (
            {"a.slice": "1048576", "a.slice/b.scope": "0"},
            "rw,nsdelegate,memory_recursiveprot",
            None,
        ),
        ({"a.slice": "max", "a.slice/b.scope": "max"}, "rw", None),
    ],
)
def test_memory_low_is_void_below_an_unprotected_ancestor(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lows: dict[str, str],
    options: str,
    gap: str | None,
) -> None:
    """The kernel caps a cgroup's memory.low at its parent's effective one (cgroup-v2.rst)."""
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path)
    own = _levels(tmp_path, lows)
    mounts = f"cgroup2 {tmp_path} cgroup2 {options} 0 0\n"
    assert cgroups.unprotected_ancestor(own, mounts) == (tmp_path / gap if gap else None)


@pytest.mark.parametrize("own", ["/a.scope", "/a.scope/levelfield-harness"])
def test_v2_base_is_the_delegated_cgroup_even_from_the_harness_leaf(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, own: str
) -> None:
    """A run started after another moved the scope's processes one down must find the same base."""
    monkeypatch.setattr(cgroups, "CGROUP_ROOT", tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    host = cgroups.detect(f"0::{own}\n", "")
    assert (host.version, host.bases) == (2, {"unified": tmp_path / "a.scope"})
