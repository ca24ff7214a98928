"""Reading the kernel's OOM-kill lines: whose process, at whose limit (sandbox/_kernel_oom.py)."""

from levelfield.outcome import PhaseLog, classify, unexplained_kill
from levelfield.records import Evidence, PhaseResult, Reason
from levelfield.sandbox._kernel_oom import _names, parse_oom_kill

# As this host's kernel (6.18) logged them: a process trial at a parent cgroup's limit, and a
# Podman container at its own. The global form is the same line with `global_oom` in place of
# `oom_memcg=` (mm/memcontrol.c, mem_cgroup_print_oom_context).
PARENT = (
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/process_api/a2606/exp-parent,task_memcg=/process_api/a2606/exp-parent/"
    "levelfield/run1/trial1,task=python3,pid=26085,uid=0"
)
PODMAN = (
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=libpod-f7d5,mems_allowed=0,"
    "oom_memcg=/libpod_parent/libpod-f7d5,task_memcg=/libpod_parent/libpod-f7d5,"
    "task=python3,pid=26546,uid=0"
)
GLOBAL = (
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
    "task_memcg=/levelfield/run1/trial1,task=node,pid=77,uid=0"
)


def test_an_oom_kill_line_names_the_victim_and_whose_limit_it_was() -> None:
    parent = parse_oom_kill(PARENT)
    assert parent is not None and (parent.task, parent.pid) == ("python3", 26085)
    assert parent.limit_cgroup == "/process_api/a2606/exp-parent"
    assert _names(parent.victim_cgroup, "/levelfield/run1/trial1")
    assert not _names(parent.limit_cgroup, "/levelfield/run1/trial1")  # a limit above the trial
    podman = parse_oom_kill(PODMAN)
    assert podman is not None and _names(podman.limit_cgroup or "", "f7d5")  # its own ceiling
    host = parse_oom_kill(GLOBAL)
    assert host is not None and host.limit_cgroup is None and host.task == "node"
    assert parse_oom_kill("Memory cgroup out of memory: Killed process 26085 (python3)") is None
    assert not _names("/levelfield/run1/trial10", "/levelfield/run1/trial1")


def test_a_kill_above_the_ceiling_is_host_pressure_a_bare_sigkill_unexplained() -> None:
    """The trial's cgroup counts a kill at its parent's limit too: only the kernel log's word
    (outside_oom_kills) moves the verdict from the trial's ceiling to the host."""
    outside = Evidence(oom_kills=1, outside_oom_kills=1, host_oom_kills=1)
    assert classify(PhaseLog(reward=0.0, evidence=outside)) is Reason.HOST_PRESSURE
    both = Evidence(oom_kills=2, outside_oom_kills=1, host_oom_kills=2)
    assert classify(PhaseLog(reward=0.0, evidence=both)) is Reason.OOM_KILLED
    killed = PhaseResult(exit_code=137, signal=9)
    bare = PhaseLog(reward=0.0, agent=killed, evidence=Evidence(host_oom_kills=0))
    assert classify(bare) is Reason.TESTS_FAILED
    assert "unexplained" in (unexplained_kill(bare) or "")
    remote = PhaseLog(reward=0.0, agent=killed, evidence=Evidence(host_oom_kills=None))
    assert unexplained_kill(remote) is None  # the oci sandbox says what it could not read
