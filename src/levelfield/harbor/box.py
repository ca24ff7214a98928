"""A levelfield sandbox serving one Harbor trial: Harbor's exec, uploads and downloads on it, the
telemetry sampler beside it, and each ceiling the kernel enforced during an exec turned into a
levelfield exception (`errors.CeilingHit`) that names the kill and its counter.

No Harbor import here (`environment.py` adapts this to Harbor's async API), so that it runs and is
tested on any Python levelfield supports. Which exec a kill is booked to: the counters are read
before and after each exec, and one that grew while an exec ran is that exec's. An exec that
failed with its counter grown raises at once; one that succeeded (the agent recovered, e.g. a pip
worker killed and retried) is remembered, and `stop` raises it only if the trial did not pass,
as `outcome.classify` books a ceiling hit only against a trial that did not pass.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shlex
import tarfile
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from levelfield.errors import (
    CeilingHit,
    LevelfieldOOMKilled,
    LevelfieldPidsExhausted,
    LevelfieldStorageExhausted,
    SandboxError,
)
from levelfield.harbor import leftovers
from levelfield.harbor.options import EnvironmentOptions
from levelfield.harbor.record import RECORD_DIR, CeilingHitNote, EnvironmentRecord, record_path
from levelfield.masking import Masker, known_secrets
from levelfield.policy import Limits, Policy, apply_policy
from levelfield.records import Evidence, PhaseResult, Telemetry
from levelfield.runner import ENOSPC_TEXT
from levelfield.sandbox import BackendOptions, Sandbox, get_backend
from levelfield.sandbox.auto import route_task
from levelfield.tasks import Task
from levelfield.telemetry import Sampler, TrialWatch, host_context

# Harbor's exec takes no timeout to mean none; the sandbox needs a number. A week.
NO_TIMEOUT_S = 7 * 24 * 3600.0
COMMAND_CHARS = 300  # of each exec's command kept in execs.jsonl and the ceiling notes
TESTS_DIR = PurePosixPath("/tests")  # its upload starts the verifier's phase
LOGS_DIR = PurePosixPath("/logs")
_MIB = 1024 * 1024


def run_dir() -> Path:
    """Where the backends keep what outlives a trial (image build logs and their locks)."""
    default = Path.home() / ".cache" / "levelfield" / "harbor"
    return Path(os.environ.get("LEVELFIELD_HARBOR_DIR", default))


@dataclass(frozen=True, slots=True)
class ExecCall:
    """One `exec` as Harbor asked for it (its env already merged with the persistent one)."""

    command: str
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout_s: float | None = None
    user: str | int | None = None


class HarborBox:
    """Started by `start`, closed by `stop`, which writes the levelfield record beside Harbor's
    result. Thread-safe for Harbor's concurrent execs within the trial."""

    def __init__(
        self, task: Task, policy: Policy, options: EnvironmentOptions, trial_dir: Path
    ) -> None:
        self.task, self.policy, self.options = task, policy, options
        self.limits: Limits = apply_policy(policy, task.spec)
        self.trial_dir = trial_dir
        self.dir = trial_dir / RECORD_DIR
        self.backend_name = (
            route_task(task).backend if options.backend == "auto" else options.backend
        )
        self.run_id = leftovers.run_id()
        self.masker: Masker = known_secrets()
        self._box: Sandbox | None = None
        self._stack = ExitStack()
        self._watch = TrialWatch()
        self._sampler: Sampler | None = None
        self._numbers = itertools.count(1)
        self._lock = threading.Lock()
        self._hits: list[CeilingHitNote] = []
        self._unraised: list[CeilingHit] = []
        self._execs = 0
        self._phase_s: dict[str, float] = {}
        self._phase, self._phase_t = "start", time.monotonic()
        self._host = host_context(1)
        self._started = datetime.now(UTC)
        self._enforcement = ""

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / leftovers.OWNER_FILE).write_text(self.run_id)
        backend = get_backend(
            self.backend_name,
            BackendOptions(self.run_id, run_dir(), uv_shim=self.options.uv_shim),
        )
        leftovers.reap_dead_runs(backend)
        self._enforcement = backend.enforcement().describe()
        box = backend.start(
            self.task, self.limits, trial_id=self.trial_dir.name, trial_dir=self.dir
        )
        self._box = box
        try:
            self._sampler = self._stack.enter_context(Sampler(box))
            self._stack.enter_context(self._watch.begin(box))
        except BaseException:
            self._stack.close()
            box.close()
            raise
        self._mark("agent")

    def stop(self, reward: float | None) -> CeilingHit | None:
        """Close the sandbox and write the record. Returns the ceiling hit to raise when one
        was survived by its exec but the trial did not pass (`reward` below 1 or none)."""
        box, self._box = self._box, None
        if box is None:
            return None
        self._mark("done")
        try:
            evidence = box.evidence()  # the counters vanish with the cgroup
            self._watch.finish()
        finally:
            self._stack.close()
            box.close()
        late = self._unraised[0] if self._unraised and (reward is None or reward < 1.0) else None
        if late is not None:
            self._hits = [
                h.model_copy(update={"raised": True}) if h.message == str(late) else h
                for h in self._hits
            ]
        self._write_record(box, evidence)
        with contextlib.suppress(OSError):
            (self.dir / "exec").rmdir()  # each exec's log is read and removed; keep no husk
        return late

    # -- exec -------------------------------------------------------------------------------

    def number(self) -> int:
        """A number for the next exec, so that `cancel` can find its process group."""
        return next(self._numbers)

    def exec(self, call: ExecCall, number: int | None = None) -> tuple[str, int]:
        """(output, exit code), stdout and stderr merged as Harbor's docker environment does.
        Raises the CeilingHit of a failed exec, and Harbor's own RuntimeError on a timeout."""
        box = self._require()
        number = number if number is not None else self.number()
        log = self.dir / "exec" / f"{number}.log"
        timeout_s = float(call.timeout_s) if call.timeout_s else NO_TIMEOUT_S
        before = box.evidence()
        result = box.exec(
            shell_command(call, pid_file=self._pid_file(number)),
            timeout_s=timeout_s,
            log_path=log,
            env=call.env,
        )
        after = box.evidence()
        output = _read_and_remove(log)
        hit = ceiling_hit(before, after, self.limits, result, output)
        failed = result.timed_out or result.exit_code != 0
        self._note(number, call, result, hit, failed)
        if hit is not None and failed:
            raise hit
        if result.timed_out:
            raise RuntimeError(f"Command timed out after {call.timeout_s} seconds")
        return output, int(result.exit_code or 0)

    def cancel(self, number: int) -> None:
        """Harbor cancelled an exec (its own timeout): kill its process group, as a timeout
        would, so that it does not run on beside the next phase."""
        box = self._box
        if box is None:
            return
        pid_file = self._pid_file(number)
        kill = f'p=$(cat {pid_file} 2>/dev/null) && kill -KILL -- "-$p" 2>/dev/null; true'
        box.exec(kill, timeout_s=30, log_path=self.dir / "exec" / "cancel.log")

    # -- files ------------------------------------------------------------------------------

    def upload_file(self, source: Path, target: str) -> None:
        self._require().copy_in(Path(source), PurePosixPath(target))

    def upload_dir(self, source: Path, target: str) -> None:
        """Into what is there, as `docker cp` does; /tests replaces whatever the agent left
        there (and brings the uv shim on oci), and starts the verifier's phase."""
        box, dest = self._require(), PurePosixPath(target)
        if dest == TESTS_DIR:
            self._mark("verifier")
            box.copy_in(Path(source), dest)
            return
        packed = self.dir / f"upload-{next(self._numbers)}.tar"
        with tarfile.open(packed, "w") as tar:
            for child in sorted(Path(source).iterdir()):
                tar.add(child, arcname=child.name)
        inside = PurePosixPath("/tmp") / f".levelfield-{packed.name}"
        try:
            box.copy_in(packed, inside)
        finally:
            packed.unlink(missing_ok=True)
        q = shlex.quote
        output, code = self.exec(
            ExecCall(
                f"mkdir -p {q(target)} && tar -xf {inside} -C {q(target)} --no-same-owner; "
                f"s=$?; rm -f {inside}; exit $s",
                user="root",
            )
        )
        if code != 0:
            raise SandboxError(f"upload of {source} to {target} failed ({code}): {output[-500:]}")

    def download_file(self, source: str, target: Path) -> None:
        data = self._require().read_file(PurePosixPath(source))
        if data is None:
            raise FileNotFoundError(f"{source} not found in the sandbox")
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(data)

    def download_dir(self, source: str, target: Path) -> None:
        """/logs/* from the host side (no exec, no room needed on a full disk); else by tar."""
        box, src, dest = self._require(), PurePosixPath(source), Path(target)
        dest.mkdir(parents=True, exist_ok=True)
        if src == LOGS_DIR or LOGS_DIR in src.parents:
            with tempfile.TemporaryDirectory() as tmp:
                box.collect_logs(Path(tmp))
                found = Path(tmp) / src.relative_to(LOGS_DIR)
                if found.is_dir():
                    _copy_tree(found, dest)
            return
        packed = PurePosixPath("/tmp") / f".levelfield-download-{next(self._numbers)}.tar"
        output, code = self.exec(
            ExecCall(f"tar -cf {packed} -C {shlex.quote(source)} .", user="root")
        )
        data = box.read_file(packed) if code == 0 else None
        self.exec(ExecCall(f"rm -f {packed}", user="root"))
        if data is None:
            raise SandboxError(f"download of {source} failed ({code}): {output[-500:]}")
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")

    # -- internals --------------------------------------------------------------------------

    def _require(self) -> Sandbox:
        if self._box is None:
            raise SandboxError("the levelfield sandbox is not started (or already stopped)")
        return self._box

    def _pid_file(self, number: int) -> PurePosixPath:
        return PurePosixPath("/tmp") / f".levelfield-exec-{number}.pid"

    def _mark(self, phase: str) -> None:
        with self._lock:
            now = time.monotonic()
            if phase == self._phase:
                return
            self._phase_s[self._phase] = round(now - self._phase_t, 3)
            self._phase, self._phase_t = phase, now
        if phase != "done":
            self._watch.mark(phase)

    def _note(
        self,
        number: int,
        call: ExecCall,
        result: PhaseResult,
        hit: CeilingHit | None,
        failed: bool,
    ) -> None:
        command = self.masker.text(call.command)[:COMMAND_CHARS]
        line = {
            "exec": number,
            "phase": self._phase,
            "command": command,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_s": round(result.duration_s, 3),
            "ceiling_hit": str(hit) if hit else None,
        }
        with self._lock:
            self._execs += 1
            with open(self.dir / "execs.jsonl", "a") as fh:
                fh.write(json.dumps(line) + "\n")
            if hit is not None:
                note = CeilingHitNote(
                    exception=type(hit).__name__,
                    message=str(hit),
                    command=command,
                    exit_code=result.exit_code,
                    raised=failed,
                )
                self._hits.append(note)
                if not failed:
                    self._unraised.append(hit)

    def _write_record(self, box: Sandbox, evidence: Evidence) -> None:
        notes = tuple(f"{h.exception}: {h.message} (raised: {h.raised})" for h in self._hits)
        telemetry = Telemetry(
            host=self._host,
            samples=tuple(self._sampler.samples if self._sampler else ()),
            phase_s=dict(self._phase_s),
            sample_every_s=self._sampler.every_s if self._sampler else 0.0,
        )
        finished = datetime.now(UTC)
        record = EnvironmentRecord(
            trial_name=self.trial_dir.name,
            task=self.task.name,
            policy=self.policy.name,
            policy_bounds=self.policy.describe(),
            spec=asdict(self.task.spec),
            limits=asdict(self.limits),
            backend=self.backend_name,
            enforcement=self._enforcement,
            evidence=evidence.model_copy(update={"notes": (*evidence.notes, *notes)}),
            telemetry=self._watch.add_to(telemetry),
            ceiling_hits=tuple(self._hits),
            execs=self._execs,
            image=box.image,
            started_at=self._started.isoformat(timespec="milliseconds"),
            finished_at=finished.isoformat(timespec="milliseconds"),
            duration_s=round((finished - self._started).total_seconds(), 3),
        )
        path = record_path(self.trial_dir)
        path.write_text(self.masker.record(record).model_dump_json(indent=2))


def shell_command(call: ExecCall, *, pid_file: PurePosixPath) -> str:
    """The command in its own process group (bash job control), its pid in `pid_file` so that a
    cancelled exec can be killed whole; in `cwd` and as `user` when Harbor asks."""
    body = call.command
    if call.user is not None and str(call.user) not in ("root", "0"):
        who = shlex.quote(str(call.user))
        body = (
            f'u=$(getent passwd {who} | cut -d: -f1); exec su -s /bin/bash "${{u:-{who}}}" '
            f"-c {shlex.quote(body)}"
        )
    if call.cwd:
        body = f"cd {shlex.quote(call.cwd)} || exit 1\n{body}"
    return (
        "set -m\n"
        f"(\n{body}\n) &\n"
        f"echo $! >{pid_file} 2>/dev/null\n"
        "set +m\n"
        "wait $!\n"
        f"s=$?; rm -f {pid_file}; exit $s\n"
    )


def ceiling_hit(
    before: Evidence, after: Evidence, limits: Limits, result: PhaseResult, output: str
) -> CeilingHit | None:
    """The ceiling whose kernel counter grew between `before` and `after`, if any."""
    exit_text = "timed out" if result.timed_out else f"exit {result.exit_code}"
    if after.oom_kills > before.oom_kills:
        ceiling = limits.memory_ceiling_bytes
        what = f"memory ceiling {_mib(ceiling)} MiB hit" if ceiling else "OOM kill, no ceiling"
        peak_bytes = after.memory_peak_bytes
        peak = f", memory peak {_mib(peak_bytes)} MiB" if peak_bytes else ""
        return LevelfieldOOMKilled(
            what,
            evidence=f"oom_kill={after.oom_kills - before.oom_kills} ({exit_text}{peak}; spec "
            f"{_mib(limits.memory_spec_bytes)} MiB, policy {limits.policy})",
        )
    if after.pids_max_hits > before.pids_max_hits:
        return LevelfieldPidsExhausted(
            f"pids ceiling {limits.pids_max} hit",
            evidence=f"pids.events max={after.pids_max_hits - before.pids_max_hits} ({exit_text})",
        )
    ceiling = limits.storage_ceiling_bytes
    filled = after.storage_full and not before.storage_full
    if ceiling is not None and (filled or ENOSPC_TEXT in output):
        how = "disk full" if filled else f"'{ENOSPC_TEXT}' in the output"
        return LevelfieldStorageExhausted(
            f"storage ceiling {_mib(ceiling)} MiB hit",
            evidence=f"{how} ({exit_text}; policy {limits.policy})",
        )
    return None


def _mib(n: int | None) -> str:
    return f"{(n or 0) / _MIB:.0f}"


def _read_and_remove(log: Path) -> str:
    try:
        return log.read_bytes().decode(errors="replace")
    except OSError:
        return ""
    finally:
        log.unlink(missing_ok=True)


def _copy_tree(source: Path, dest: Path) -> None:
    """Regular files and directories only: a link the agent left is not followed on the host."""
    for directory, _dirs, files in os.walk(source):  # never into a linked directory
        here = Path(directory)
        (dest / here.relative_to(source)).mkdir(parents=True, exist_ok=True)
        for name in files:
            path = here / name
            if path.is_file() and not path.is_symlink():
                (dest / path.relative_to(source)).write_bytes(path.read_bytes())
