"""Telling the agent its budget: the trial's floor and ceiling as environment variables and as
one sentence added to the instruction. A factor of the trial (`Trial.limits_disclosed`), so a
sweep can ask, paired by task, whether an agent that knows its budget picks a leaner strategy.

Only the agent phase sees it: the verifier runs exactly as it would without.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path, PurePosixPath

from levelfield.policy import Limits
from levelfield.records import Evidence, PhaseResult
from levelfield.sandbox import Observables, Sandbox, Usage
from levelfield.tasks import Task

PREFIX = "LEVELFIELD_"


def disclosure_env(limits: Limits) -> dict[str, str]:
    """Unset variables mean uncapped; every number in bytes or CPUs, as the names say."""
    values = {
        "MEMORY_CEILING_BYTES": limits.memory_ceiling_bytes,
        "MEMORY_FLOOR_BYTES": limits.memory_floor_bytes,
        "CPU_CEILING": limits.cpu_ceiling,
        "CPU_FLOOR": limits.cpu_floor,
        "STORAGE_CEILING_BYTES": limits.storage_ceiling_bytes,
        "PIDS_MAX": limits.pids_max,
    }
    return {PREFIX + k: _number(v) for k, v in values.items() if v is not None}


def disclosure_sentence(limits: Limits) -> str:
    memory = limits.memory_ceiling_bytes
    cpus = limits.cpu_ceiling
    storage = limits.storage_ceiling_bytes
    parts = [
        f"{_mib(memory)} of memory" if memory is not None else "no memory ceiling",
        f"{_number(cpus)} CPUs" if cpus is not None else "no CPU ceiling",
        f"{_mib(storage)} of disk" if storage is not None else "no disk ceiling",
    ]
    return (
        f"Resource limits of this environment: {', '.join(parts)}; a process that exceeds the "
        "memory limit is killed (the LEVELFIELD_*_BYTES variables hold the exact numbers)."
    )


def disclosed_task(task: Task, limits: Limits) -> Task:
    sentence = disclosure_sentence(limits)
    return replace(task, instruction=f"{task.instruction.rstrip()}\n\n{sentence}\n")


class DisclosedSandbox:
    """The agent phase's view of the sandbox: every exec carries the limit variables."""

    def __init__(self, box: Sandbox, limits: Limits) -> None:
        self._box, self._env = box, disclosure_env(limits)
        self.secrets = box.secrets

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> PhaseResult:
        return self._box.exec(
            command, timeout_s=timeout_s, log_path=log_path, env={**self._env, **(env or {})}
        )

    def copy_in(self, src: Path, dest: PurePosixPath) -> None:
        self._box.copy_in(src, dest)

    def read_file(self, path: PurePosixPath) -> bytes | None:
        return self._box.read_file(path)

    def usage(self) -> Usage:
        return self._box.usage()

    def evidence(self) -> Evidence:
        return self._box.evidence()

    def network_namespace(self) -> Path | None:
        return self._box.network_namespace()

    def reaches_outside(self) -> bool:
        return self._box.reaches_outside()

    def observables(self) -> Observables:
        return self._box.observables()

    def collect_logs(self, dest: Path) -> tuple[str, ...]:
        return self._box.collect_logs(dest)

    def close(self) -> None:
        self._box.close()


def _number(value: float | int) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _mib(value: int) -> str:
    return f"{value / (1 << 20):.0f} MiB"
