"""A levelfield sandbox serving one trial of another harness: the runner's lifecycle around the
harness's own phases (backend start under the policy's limits, sampler and watch, evidence
before close, telemetry, masking, the record), and each ceiling the kernel enforced during an
exec turned into a levelfield exception (`errors.CeilingHit`) that names the kill and its
counter.

Once the harness starts its grader (its upload of /tests), the grader stands apart as in a native
trial (`sandbox/grader.py`): every later exec runs in the grader's own namespaces, the files under
/tests and /logs/verifier are the grader's disk's, and what the agent left running is listed in
the record.

An exec that failed with its counter grown raises at once; one that succeeded (the agent
recovered, e.g. a pip worker killed and retried) is remembered, and `close` hands it back only
if the trial did not pass, as `outcome.classify` books a ceiling hit only against a trial that
did not pass. Once a hit was raised the trial has ended for the harness; `ended_by` says by
which, so that an adapter can refuse to let a grader give that trial a verdict.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import threading
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from levelfield.errors import CeilingHit, LevelfieldStorageExhausted, SandboxError
from levelfield.hosted import leftovers
from levelfield.hosted.commands import ExecCall, ceiling_hit, shell_command
from levelfield.hosted.record import CeilingHitNote
from levelfield.lifecycle import TrialLife
from levelfield.masking import Masker, known_secrets
from levelfield.outcome import PhaseLog, decide
from levelfield.policy import Limits, Policy, apply_policy
from levelfield.records import Evidence, PhaseResult, TrialRecord
from levelfield.sandbox import BackendOptions, Sandbox, get_backend, grader, trees
from levelfield.sandbox.auto import route_task
from levelfield.tasks import Task
from levelfield.telemetry import host_context

# A harness's exec may take no timeout to mean none; the sandbox needs a number. A week.
NO_TIMEOUT_S = 7 * 24 * 3600.0
COMMAND_CHARS = 300  # of each exec's command kept in execs.jsonl and the ceiling notes


def cache_dir() -> Path:
    """Where the backends keep what outlives a trial (image build logs and their locks)."""
    default = Path.home() / ".cache" / "levelfield" / "harbor"
    return Path(os.environ.get("LEVELFIELD_HARBOR_DIR", default))


@dataclass(frozen=True, slots=True)
class Hosting:
    """Where a hosted trial runs and keeps its record: the backend (`auto` routes the task),
    the record folder, the trial's name there, and the harness's run prefix (leftovers.py)."""

    backend: str
    record_dir: Path
    trial_name: str
    run_prefix: str
    uv_shim: bool = False


@dataclass(frozen=True, slots=True)
class GraderFound:
    """What the harness's grader, standing apart, saw: processes not its own that touched its
    files (the agent's doing), its notes, and what the agent had left running."""

    apart: bool = False
    tampered: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    left_running: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ExecOutput:
    output: str
    exit_code: int
    timed_out: bool


class HostedSandbox:
    """Started by `start`, closed by `close`, which writes the record into `hosting.record_dir`.
    Thread-safe for the harness's concurrent execs within the trial."""

    def __init__(self, task: Task, policy: Policy, hosting: Hosting) -> None:
        self.task, self.policy, self.hosting = task, policy, hosting
        self.limits: Limits = apply_policy(policy, task.spec)
        # absolute: the process backend mounts the trial's disk below it, and finds that mount
        # again by its absolute path (Inspect hands over its log's path relative to the cwd)
        self.dir = hosting.record_dir.absolute()
        self.backend_name = (
            route_task(task).backend if hosting.backend == "auto" else hosting.backend
        )
        self.run_id = leftovers.run_id(hosting.run_prefix)
        self.masker: Masker = known_secrets()
        self.ended_by: CeilingHit | None = None  # the first hit raised: the trial ended there
        self._box: Sandbox | None = None
        self._life: TrialLife | None = None
        self._numbers = itertools.count(1)
        self._pid_files: dict[int, PurePosixPath] = {}
        self._lock = threading.Lock()
        self._hits: list[CeilingHitNote] = []
        self._unraised: list[CeilingHit] = []
        self._execs = 0
        self._host = host_context(1)
        self._enforcement = ""
        self._grader: grader.Grader | None = None
        self._grading = False  # the harness's grader has begun (apart, or in the sandbox)
        self._found = GraderFound()  # what the grader apart saw, kept for the record
        self._filled_beside: str | None = None  # a full disk the grader's exec met (grader.py)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / leftovers.OWNER_FILE).write_text(self.run_id)
        backend = get_backend(
            self.backend_name,
            BackendOptions(self.run_id, cache_dir(), uv_shim=self.hosting.uv_shim),
        )
        leftovers.reap_dead_runs(backend, self.hosting.run_prefix)
        self._enforcement = backend.enforcement().describe()
        life = TrialLife(
            self.task,
            self.limits,
            trial_id=self.hosting.trial_name,
            trial_dir=self.dir,
            secrets=self.masker,
        )
        self._box, self._life = life.start(backend), life
        self.mark("agent")

    def close(self, passed: bool | None, reward: float | None = None) -> CeilingHit | None:
        """Close the sandbox and write the record (`reward`: the grader's, when the harness
        says it; `passed` None: the harness gave no verdict). Returns the ceiling hit to raise
        when one was survived by its exec and the trial did not pass."""
        life, box, self._box = self._life, self._box, None
        if box is None or life is None:
            return None
        self.mark("done")
        evidence = self._with_grader_evidence(life.end(lambda box: self._close_grader()))
        late = self.survived() if passed is False else None
        if late is not None:
            self.note_raised(late)
        self._write_record(life, box, evidence, passed, reward)
        with contextlib.suppress(OSError):
            (self.dir / "exec").rmdir()  # each exec's log is read and removed; keep no husk
        return late

    @property
    def is_started(self) -> bool:
        return self._box is not None

    # -- exec -------------------------------------------------------------------------------

    def number(self) -> int:
        """A number for the next exec, so that `cancel` can find its process group."""
        return next(self._numbers)

    def run(self, call: ExecCall, number: int | None = None) -> ExecOutput:
        """The exec's output and exit code; raises the CeilingHit of a failed exec."""
        box = self.sandbox()
        number = number if number is not None else self.number()
        log = self.dir / "exec" / f"{number}.log"
        timeout_s = float(call.timeout_s) if call.timeout_s else NO_TIMEOUT_S
        before = box.evidence()
        command = shell_command(call, pid_file=self.pid_file(number))
        if self._grader is not None:  # the grader's own namespaces: the harness's env only
            result = self._grader.run(command, timeout_s=timeout_s, log_path=log, env=call.env)
        else:
            result = box.exec(command, timeout_s=timeout_s, log_path=log, env=call.env)
        after = box.evidence()
        output = _read_and_remove(log)
        hit = self._beside_leftovers(ceiling_hit(before, after, self.limits, result, output))
        failed = result.timed_out or result.exit_code != 0
        self._note(number, call, result, hit, failed)
        if hit is not None and failed:
            raise hit
        return ExecOutput(output, int(result.exit_code or 0), result.timed_out)

    def _beside_leftovers(self, hit: CeilingHit | None) -> CeilingHit | None:
        """A disk that filled during a grader's exec while the agent's processes ran beside it
        is no ceiling hit of the grader's (`grader.filled_beside`): the tests' verdict
        stands, and the record says why."""
        judge = self._grader
        if not isinstance(hit, LevelfieldStorageExhausted) or not (judge and judge.view.leftovers):
            return hit
        self._filled_beside = grader.filled_beside(len(judge.view.leftovers))
        return None

    def cancel(self, number: int) -> None:
        """The harness cancelled an exec: kill its process group, as a timeout would, so that
        it does not run on beside the next phase. A grader's exec ends with its namespace."""
        box = self._box
        if box is None:
            return
        if self._grader is not None:
            self._grader.cancel()
            return
        pid_file = self.pid_file(number)
        kill = f'p=$(cat {pid_file} 2>/dev/null) && kill -KILL -- "-$p" 2>/dev/null; true'
        box.exec(kill, timeout_s=30, log_path=self.dir / "exec" / "cancel.log")

    def survived(self) -> CeilingHit | None:
        """The first ceiling hit an exec survived, not raised yet."""
        with self._lock:
            return self._unraised[0] if self._unraised else None

    def note_raised(self, hit: CeilingHit) -> None:
        """`hit`, survived by its exec, is raised now (the trial did not pass)."""
        with self._lock:
            self._unraised = [h for h in self._unraised if h is not hit]
            self.ended_by = self.ended_by or hit
            self._hits = [
                h.model_copy(update={"raised": True}) if h.message == str(hit) else h
                for h in self._hits
            ]

    # -- the grader -------------------------------------------------------------------------

    def begin_grading(self) -> None:
        """The harness's grader begins: from now on its execs run apart, and /tests and
        /logs/verifier are the grader's. Where the backend cannot start it apart (a remote
        engine) it runs in the sandbox, as the harness would run it, and the record says so."""
        with self._lock:
            if self._grading:
                return
            self._grading = True
        self.mark("verifier")
        self._grader = grader.Grader.start(self.sandbox(), self.dir)

    @property
    def grading(self) -> bool:
        return self._grading

    def put(self, source: Path, target: PurePosixPath, *, merge: bool = False) -> None:
        """A file or tree of the harness's at `target`: on the grader's disk for its paths."""
        if self._grader is not None and self._grader.owns(target):
            self._grader.copy_in(source, target, merge=merge)
        else:
            self.sandbox().copy_in(source, target)

    def entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry:
        """What `path` is, read from outside: the grader's disk for its paths."""
        if self._grader is not None and self._grader.owns(path):
            return self._grader.read_entry(path, max_bytes=max_bytes)
        return self.sandbox().read_entry(path, max_bytes=max_bytes)

    def keep_grader_logs(self, dest: Path) -> bool:
        """The grader's /logs/verifier into `dest`; False when the grader ran in the sandbox."""
        if self._grader is None:
            return False
        self._grader.keep_logs(dest)
        return True

    def _close_grader(self) -> None:
        judge, self._grader = self._grader, None
        if judge is not None:
            self._found = GraderFound(
                True, tuple(judge.intrusions()), tuple(judge.notes()), judge.view.leftovers
            )
            judge.close()

    def _with_grader_evidence(self, evidence: Evidence) -> Evidence:
        found = self._found
        notes = found.notes if found.apart or not self._grading else (grader.IN_SANDBOX,)
        notes += (self._filled_beside,) if self._filled_beside else ()
        return evidence.model_copy(
            update={
                "notes": (*evidence.notes, *notes),
                "left_running": found.left_running,
                "tampered": found.tampered,
                "filled_beside": self._filled_beside,
            }
        )

    # -- internals --------------------------------------------------------------------------

    def sandbox(self) -> Sandbox:
        if self._box is None:
            raise SandboxError("the levelfield sandbox is not started (or already stopped)")
        return self._box

    def pid_file(self, number: int) -> PurePosixPath:
        """Where exec `number` keeps its pid (and, beside it, its stderr), under a name the agent
        cannot guess: a FIFO it planted at a known name would hang the grader's exec, and the
        trial would end as a timeout that is not the agent's."""
        with self._lock:
            if number not in self._pid_files:
                token = secrets.token_hex(8)
                self._pid_files[number] = (
                    PurePosixPath("/tmp") / f".levelfield-{token}-{number}.pid"
                )
            return self._pid_files[number]

    def mark(self, phase: str) -> None:
        if self._life is not None:
            self._life.mark(phase)

    @property
    def phase(self) -> str:
        return self._life.phase if self._life is not None else "start"

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
            "phase": self.phase,
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
                if failed:
                    self.ended_by = self.ended_by or hit
                else:
                    self._unraised.append(hit)

    def _write_record(
        self,
        life: TrialLife,
        box: Sandbox,
        evidence: Evidence,
        passed: bool | None,
        reward: float | None,
    ) -> None:
        """The one record type, decided as a native trial is from what the sandbox saw: the
        harness's reward when it said it, the ceiling hit that ended the trial. An import
        decides again with what the harness stored beside it (its exception)."""
        hits = tuple(f"{h.exception}: {h.message} (raised: {h.raised})" for h in self._hits)
        evidence = evidence.model_copy(update={"notes": (*evidence.notes, *hits)})
        reward = reward if reward is not None else (1.0 if passed else None)
        log = PhaseLog(
            evidence=evidence, reward=reward, error=self.ended_by, tampered=evidence.tampered
        )
        decision = decide(log)
        started, finished, duration_s = life.elapsed()
        record = TrialRecord(
            trial_key=self.hosting.trial_name,
            run_id=self.run_id,
            task=self.task.name,
            agent=self.hosting.run_prefix.rstrip("-") or "hosted",
            policy=self.policy.name,
            repeat=1,
            backend=self.backend_name,
            outcome=decision.outcome,
            reason=decision.reason,
            reward=reward,
            error=f"{type(self.ended_by).__name__}: {self.ended_by}" if self.ended_by else None,
            limits=asdict(self.limits),
            evidence=decision.evidence or evidence,
            telemetry=life.telemetry(self._host),
            image=box.image,
            started_at=started,
            finished_at=finished,
            duration_s=duration_s,
            spec=asdict(self.task.spec),
            policy_bounds=self.policy.describe(),
            enforcement=self._enforcement,
            ceiling_hits=tuple(self._hits),
            execs=self._execs,
        )
        life.write(record, self.dir)


def _read_and_remove(log: Path) -> str:
    try:
        return log.read_bytes().decode(errors="replace")
    except OSError:
        return ""
    finally:
        log.unlink(missing_ok=True)
