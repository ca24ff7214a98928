"""What one exec of a hosted sandbox runs (its shell wrapper), and which kernel counter names
which kill (`ceiling_hit`).

Which exec a kill is booked to: the counters are read before and after each exec, and one that
grew while an exec ran is that exec's.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from levelfield.errors import (
    CeilingHit,
    LevelfieldOOMKilled,
    LevelfieldPidsExhausted,
    LevelfieldStorageExhausted,
)
from levelfield.outcome import ENOSPC_TEXT, PhaseLog, decide
from levelfield.policy import Limits
from levelfield.records import Evidence, PhaseResult, Reason

_MIB = 1024 * 1024
OUTPUT_TAIL_CHARS = 4000  # of an exec's output, where its words are read


@dataclass(frozen=True, slots=True)
class ExecCall:
    """One `exec` as the harness asked for it (its env already merged with any persistent one).
    `stdin` is a file in the sandbox fed to the command; `stderr_marker`, when set, keeps stderr
    apart: it follows stdout in the output after that marker line (Harbor merges the two, as
    its docker environment does; Inspect wants them apart)."""

    command: str
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_s: float | None = None
    user: str | int | None = None
    stdin: PurePosixPath | None = None
    stderr_marker: str | None = None


def shell_command(call: ExecCall, *, pid_file: PurePosixPath) -> str:
    """The command in its own process group (bash job control), its pid in `pid_file` so that a
    cancelled exec can be killed whole; in `cwd` and as `user` when the harness asks."""
    body = call.command
    if call.user is not None and str(call.user) not in ("root", "0"):
        who = shlex.quote(str(call.user))
        body = (
            f'u=$(getent passwd {who} | cut -d: -f1); exec su -s /bin/bash "${{u:-{who}}}" '
            f"-c {shlex.quote(body)}"
        )
    if call.cwd:
        body = f"cd {shlex.quote(call.cwd)} || exit 1\n{body}"
    redirect, after = " 2>&3", ""
    if call.stdin is not None:
        redirect += f" <{call.stdin}"
        after += f"rm -f {call.stdin}; "
    if call.stderr_marker is not None:
        err = f"{pid_file}.err"
        redirect += f" 2>{err}"
        after += f"printf '\\n%s\\n' {shlex.quote(call.stderr_marker)}; cat {err}; rm -f {err}; "
    # The shell's own stderr goes nowhere while job control is on: bash reports a job that ended
    # before `set +m` ("[1]+ Exit 3 ...") there, which is not the command's output.
    return (
        "exec 3>&2 2>/dev/null\n"
        "set -m\n"
        f"(\n{body}\n){redirect} 3>&- &\n"
        f"echo $! >{pid_file}\n"
        "set +m\n"
        "wait $!\n"
        f"s=$?; exec 2>&3 3>&-; rm -f {pid_file}; {after}exit $s\n"
    )


def split_stderr(output: str, marker: str) -> tuple[str, str]:
    """(stdout, stderr) of an exec run with `stderr_marker`; all stdout if the marker is missing
    (the wrapper was killed before it printed stderr)."""
    head, found, tail = output.rpartition(f"\n{marker}\n")
    return (head, tail) if found else (output, "")


def ceiling_hit(
    before: Evidence, after: Evidence, limits: Limits, result: PhaseResult, output: str
) -> CeilingHit | None:
    """The ceiling the kernel enforced during one exec, decided by the one verdict function
    (`outcome.decide`) on what the exec changed of the counters, as a native trial's would be:
    "No space left on device" in the output is a full disk only where the disk shows it."""
    grown = after.model_copy(
        update={
            "oom_kills": after.oom_kills - before.oom_kills,
            "outside_oom_kills": max(0, after.outside_oom_kills - before.outside_oom_kills),
            "pids_max_hits": after.pids_max_hits - before.pids_max_hits,
            "storage_full": after.storage_full and not before.storage_full,
            "host_disk_full": False,
            "notes": (),
        }
    )
    phase = result.model_copy(update={"output_tail": output[-OUTPUT_TAIL_CHARS:]})
    decision = decide(PhaseLog(agent=phase, evidence=grown))
    exit_text = "timed out" if result.timed_out else f"exit {result.exit_code}"
    if grown.oom_kills > 0 and decision.reason in (Reason.OOM_KILLED, Reason.HOST_PRESSURE):
        ceiling = limits.memory_ceiling_bytes
        what = f"memory ceiling {_mib(ceiling)} MiB hit" if ceiling else "OOM kill, no ceiling"
        peak_bytes = after.memory_peak_bytes
        peak = f", memory peak {_mib(peak_bytes)} MiB" if peak_bytes else ""
        return LevelfieldOOMKilled(
            what,
            evidence=f"oom_kill={grown.oom_kills} ({exit_text}{peak}; spec "
            f"{_mib(limits.memory_spec_bytes)} MiB, policy {limits.policy})",
        )
    if decision.reason is Reason.PIDS_EXHAUSTED:
        return LevelfieldPidsExhausted(
            f"pids ceiling {limits.pids_max} hit",
            evidence=f"pids.events max={grown.pids_max_hits} ({exit_text})",
        )
    ceiling = limits.storage_ceiling_bytes
    if decision.reason is Reason.STORAGE_EXHAUSTED and ceiling is not None:
        how = "disk full" if grown.storage_full else f"'{ENOSPC_TEXT}', and the disk filled"
        return LevelfieldStorageExhausted(
            f"storage ceiling {_mib(ceiling)} MiB hit",
            evidence=f"{how} ({exit_text}; policy {limits.policy})",
        )
    return None


def _mib(n: int | None) -> str:
    return f"{(n or 0) / _MIB:.0f}"
