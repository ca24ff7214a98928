"""Every exception levelfield raises, in one tree.

    LevelfieldError
    ├── InputError                 bad input from the user: exit code 2
    │   ├── TaskError              a task directory is malformed (names the file and the field)
    │   ├── PolicyError            a policy cannot be parsed or its floor exceeds its ceiling
    │   └── RunConfigError         a run directory or option is unusable
    ├── SandboxError               the environment failed, not the agent: always an infra error
    │   ├── HostUnsupported        this host cannot enforce what was asked (no cgroup, no bwrap)
    │   ├── SandboxStartError      the sandbox could not be started
    │   ├── SandboxDied            the sandbox vanished mid-trial (its init was killed)
    │   ├── AdmissionError         a trial's floor can never fit on this host
    │   ├── NodeLost               the machine running the trial died mid-trial (Ray)
    │   ├── HostPressure           the host ran short of memory outside the trial's own limits
    │   └── CeilingHit             the kernel enforced a ceiling during a hosted exec
    │       ├── LevelfieldOOMKilled          the memory ceiling (cgroup OOM kill)
    │       ├── LevelfieldPidsExhausted      the pids ceiling (forks refused)
    │       └── LevelfieldStorageExhausted   the storage ceiling (the trial's disk filled)
    ├── AgentError                 the agent itself failed to run (bad trajectory, missing solution)
    ├── AgentSetupError            a CLI agent could not be prepared (npm, Node.js): infra
    ├── ApiError                   a model API kept failing after the retry policy: infra, not agent
    └── StoreError                 the run's database is unusable or locked by a live run
        └── RunDirFull             the run directory's filesystem filled: the run stops

`outcome.py` maps each class (along its MRO) to a reason; a new class needs its row there.
"""

from __future__ import annotations

from pathlib import Path


class LevelfieldError(Exception):
    """Base of every error levelfield raises on purpose."""


class InputError(LevelfieldError):
    """The user's input is wrong; fixing it is the user's job (CLI exit code 2)."""


class TaskError(InputError):
    """A task directory is malformed; the message names the file and, where known, the field."""

    def __init__(self, path: Path, message: str, *, field: str | None = None) -> None:
        self.path = path
        self.field = field
        where = f"{path}: {field}" if field else str(path)
        super().__init__(f"{where}: {message}")


class PolicyError(InputError):
    """A policy cannot be parsed, or would guarantee more than it allows."""


class RunConfigError(InputError):
    """An option or run directory cannot be used as given."""


class SandboxError(LevelfieldError):
    """The environment failed, not the agent: always an infra error."""


class HostUnsupported(SandboxError):
    """This host lacks a mechanism the backend needs (cgroup controller, bubblewrap, engine)."""


class SandboxStartError(SandboxError):
    """The sandbox did not come up; nothing of the agent ran."""


class SandboxDied(SandboxError):
    """The sandbox's init is gone: later phases cannot run in it."""


class AdmissionError(SandboxError):
    """The trial's floor exceeds what the whole host can guarantee, so it can never start."""


class NodeLost(SandboxError):
    """The node running the trial died; the trial may be retried on another one."""


class HostPressure(SandboxError):
    """The host itself ran short (e.g. Ray's memory monitor killed the worker)."""


class CeilingHit(SandboxError):
    """The kernel enforced a ceiling while an exec of another harness ran (`hosted/`). Raised
    so that Harbor stores it in the trial's exception_info and Inspect makes the sample an
    error: its type and message name the ceiling and the counter that proves it, instead of a
    reward 0 booked as the agent's failure."""

    def __init__(self, message: str, *, evidence: str) -> None:
        super().__init__(f"{message}, {evidence}")
        self.evidence = evidence


class LevelfieldOOMKilled(CeilingHit):
    """The memory ceiling: the cgroup's OOM-kill counter grew during the exec."""


class LevelfieldPidsExhausted(CeilingHit):
    """The pids ceiling: forks were refused (pids.events max) during the exec."""


class LevelfieldStorageExhausted(CeilingHit):
    """The storage ceiling: the trial's disk filled during the exec."""


class AgentError(LevelfieldError):
    """The agent could not be run as configured (a missing solution, a bad trajectory)."""


class AgentSetupError(LevelfieldError):
    """A CLI agent could not be installed or prepared: nothing of the agent ran."""


class ApiError(LevelfieldError):
    """The model's API failed (rate limits, overload, 5xx) beyond the retry policy."""

    def __init__(self, message: str, calls: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.calls = calls


class StoreError(LevelfieldError):
    """The run's store cannot be opened or is held by another live run."""


class RunDirFull(StoreError):
    """The run directory's filesystem is (nearly) full. The run stops: a trial run without room
    for its disk, logs or record would be booked as a failure that is the harness's own."""
