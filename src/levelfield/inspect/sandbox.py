"""The `levelfield` sandbox environment for Inspect AI: each sample in a levelfield sandbox under
the policy's limits, the task's spec enforced as floor and ceiling; `exec`, `read_file` and
`write_file` run in it.

    inspect eval inspect_harbor/harbor -T path=TASKS --sandbox levelfield:policy=strict,backend=oci
    Task(..., sandbox=("levelfield", SandboxConfig(policy="3x", memory_mb=256)))

With `import inspect` taken by the standard library, this module and `importing.py` are the only
ones that import Inspect (the `inspect` extra). An exec during which the kernel enforced a ceiling
and that failed raises the levelfield exception (`LevelfieldOOMKilled: memory ceiling 256 MiB hit,
oom_kill=1 ...`): Inspect maps no such type to a tool error, so the sample ends as an error, left
out of the score and run again by `--retry-on-error`; the evidence is also in the sample's
metadata (`levelfield`). The agent's own failures stay ordinary results. A kill an exec survived
is raised when the grader's verdict shows the sample did not pass: when a Harbor grader's reward
file is read (before Inspect has a score), else when the sandbox is cleaned up (Inspect then
keeps the score beside the error). The record is written beside Inspect's log, in
`<log>.levelfield/<sample>__e<epoch>__a<attempt>/record.json`, which `levelfield import inspect`
reads back.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import secrets
import shlex
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    sandboxenv,
)
from pydantic import BaseModel

from levelfield.errors import CeilingHit, LevelfieldError, SandboxStartError
from levelfield.hosted.commands import ExecCall, split_stderr
from levelfield.hosted.sandbox import HostedSandbox, Hosting, cache_dir
from levelfield.inspect.config import record_folder_name, sandbox_config, task_of_sample
from levelfield.sandbox.trees import READ_MAX_BYTES, Entry
from levelfield.verifier import parse_reward_json, parse_reward_txt

RUN_PREFIX = "inspect-"
METADATA_KEY = "levelfield"  # in each sample's metadata: policy, limits, record, ceiling hits
TESTS_DIR = PurePosixPath("/tests")
REWARD_FILES = {  # a Harbor grader's (inspect-harbor's scorer reads these)
    PurePosixPath("/logs/verifier/reward.txt"): parse_reward_txt,
    PurePosixPath("/logs/verifier/reward.json"): parse_reward_json,
}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
logger = logging.getLogger(__name__)


@sandboxenv(name="levelfield")
class LevelfieldSandbox(SandboxEnvironment):
    """One Inspect sample in one levelfield sandbox (process: cgroups + bubblewrap; oci: a
    container via the Docker Engine API, podman or Docker)."""

    def __init__(self, box: HostedSandbox) -> None:
        super().__init__()
        self.box = box

    @classmethod
    def config_files(cls) -> list[str]:
        return []

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return sandbox_config(config)

    @classmethod
    async def task_init(cls, task_name: str, config: Any) -> None:
        sandbox_config(config)  # a bad config stops the eval before any sample starts

    @classmethod
    async def sample_init(
        cls, task_name: str, config: Any, metadata: dict[str, Any]
    ) -> dict[str, SandboxEnvironment]:
        options = sandbox_config(config)
        record_dir, trial_name = _record_place(task_name, metadata)
        task = task_of_sample(options, metadata, record_dir / "task", _task_name(metadata))
        hosting = Hosting(
            backend=options.backend,
            record_dir=record_dir,
            trial_name=trial_name,
            run_prefix=RUN_PREFIX,
            uv_shim=options.uv_shim,
        )
        box = HostedSandbox(task, options.resolved_policy(), hosting)
        try:
            await anyio.to_thread.run_sync(box.start)
        except LevelfieldError as exc:  # the sandbox would not start: the sample's error
            raise _named(exc) from None
        _note_in_sample(
            policy=box.policy.name,
            backend=box.backend_name,
            limits=dataclasses.asdict(box.limits),
            record=str(record_dir / "record.json"),
        )
        return {"default": cls(box)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: Any,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        late: CeilingHit | None = None
        for env in environments.values():
            if isinstance(env, LevelfieldSandbox):
                score = _sample_score()
                passed = None if score is None else score >= 1.0
                hit = await anyio.to_thread.run_sync(env.box.close, passed, score)
                if hit is not None and passed is False:
                    late = late or hit
        if late is not None and not interrupted:
            _report(late)
            raise late

    # -- exec and files ---------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        box = self.box
        number = box.number()
        stdin = None
        if input is not None:  # under a name the agent cannot guess, as the pid file's
            stdin = PurePosixPath(f"{box.pid_file(number)}.in")
            data = input.encode() if isinstance(input, str) else input
            await anyio.to_thread.run_sync(self._put, stdin, data)
        marker = f"--levelfield-stderr-{secrets.token_hex(12)}--"
        call = ExecCall(
            shlex.join(cmd),
            cwd=str(self._absolute(cwd or ".")),
            env=env,
            timeout_s=timeout,
            user=user,
            stdin=stdin,
            stderr_marker=marker,
        )
        try:
            done = await anyio.to_thread.run_sync(box.run, call, number, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(box.cancel, number)
            raise
        except CeilingHit as hit:
            _report(hit)
            raise
        except LevelfieldError as exc:  # the sandbox died under the exec: infrastructure's
            raise _named(exc) from None
        if done.timed_out:
            raise TimeoutError(f"Command timed out after {timeout} seconds")
        stdout, stderr = split_stderr(done.output, marker)
        return ExecResult(
            success=done.exit_code == 0, returncode=done.exit_code, stdout=stdout, stderr=stderr
        )

    async def write_file(self, file: str, contents: str | bytes) -> None:
        """The first file written under /tests starts the grader's phase: the grader then
        stands apart (`hosted/sandbox.py`), with /tests on its own disk, new and empty."""
        path = self._absolute(file)
        data = contents.encode() if isinstance(contents, str) else contents
        if TESTS_DIR in path.parents and not self.box.grading:
            await anyio.to_thread.run_sync(self.box.begin_grading)
        await anyio.to_thread.run_sync(self._put, path, data)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        path = self._absolute(file)
        entry = await anyio.to_thread.run_sync(self._entry, path)
        if entry.kind == "directory":
            raise IsADirectoryError(21, "Is a directory", file)
        if entry.kind != "file":  # missing, or what is not a regular file is never opened
            raise FileNotFoundError(2, f"No such file ({entry.describe()})", file)
        if entry.data is None:
            raise OutputLimitExceededError(f"{READ_MAX_BYTES >> 20} MiB", None)
        if path in REWARD_FILES:
            self._raise_survived_kill(REWARD_FILES[path], entry.data)
        return entry.data.decode("utf-8") if text else entry.data

    # -- internals --------------------------------------------------------------------------

    def _absolute(self, file: str) -> PurePosixPath:
        path = PurePosixPath(file)
        return path if path.is_absolute() else self.box.task.workdir / path

    def _put(self, path: PurePosixPath, data: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "file"
            local.write_bytes(data)
            try:
                self.box.put(local, path)
            except SandboxStartError as exc:  # the process backend: not a writable path
                raise PermissionError(13, str(exc), str(path)) from None

    def _entry(self, path: PurePosixPath) -> Entry:
        return self.box.entry(path, max_bytes=READ_MAX_BYTES)

    def _raise_survived_kill(self, parse: Any, data: bytes) -> None:
        """A kill an exec survived, raised as the grader reads a reward below 1: the sample
        then has no score, as one killed outright."""
        hit = self.box.survived()
        if hit is None:
            return
        try:
            reward = parse(data.decode(errors="replace"))
        except ValueError:
            reward = None
        if reward is None or reward < 1.0:
            self.box.note_raised(hit)
            _report(hit)
            raise hit


def _record_place(task_name: str, metadata: dict[str, Any]) -> tuple[Path, str]:
    """`<log>.levelfield/<sample>__e<epoch>__a<attempt>` beside the log Inspect writes (a
    local one); else under levelfield's cache."""
    from inspect_ai.log._samples import sample_active

    active = sample_active()
    sample = str(metadata.get("__sample_id__", "sample"))
    epoch = active.epoch if active is not None else 1
    attempt = 1 + len(getattr(active, "error_retries", None) or [])
    name = record_folder_name(sample, epoch, attempt)
    location = getattr(active, "log_location", None) or ""
    if location and "://" not in location.replace("file://", ""):
        log = Path(location.removeprefix("file://"))
        return log.parent / f"{log.stem}.levelfield" / name, name
    return cache_dir() / "inspect" / _UNSAFE.sub("_", task_name) / name, name


def _task_name(metadata: dict[str, Any]) -> str:
    return str(metadata.get("task_name") or metadata.get("__sample_id__") or "sample")


def _note_in_sample(**fields: Any) -> None:
    """Into the running sample's metadata (logged with the sample, errored or not)."""
    from inspect_ai.solver._task_state import sample_state

    state = sample_state()
    if state is not None:
        state.metadata.setdefault(METADATA_KEY, {}).update(fields)


def _named(exc: LevelfieldError) -> LevelfieldError:
    """Inspect shows a sample error by its exception's `message`, else by its repr: give it the
    `Type: message` form that Harbor stores and `levelfield import` reads back."""
    exc.message = f"{type(exc).__name__}: {exc}"  # type: ignore[attr-defined]
    return exc


def _report(hit: CeilingHit) -> None:
    """The hit's type and message as Inspect shows a sample error, and its evidence in the
    sample's metadata."""
    _named(hit)
    _note_in_sample(
        ceiling_hit={"exception": type(hit).__name__, "message": str(hit), "evidence": hit.evidence}
    )


def _sample_score() -> float | None:
    """The running sample's reward for the record: its lowest score (a pass needs every one at
    full marks); None when it has none (its scorer raised, or none ran), which the record books
    as a grader that gave no reward, never as a pass."""
    from inspect_ai.scorer import value_to_float
    from inspect_ai.solver._task_state import sample_state

    state = sample_state()
    scores = state.scores if state is not None else None
    if not scores:
        return None
    to_float = value_to_float()
    return min(to_float(score.value) for score in scores.values())


def _quiet_the_compose_warning() -> None:
    """inspect-harbor's samples name the `docker` sandbox with a compose file; Inspect warns
    that the levelfield sandbox will not use it. levelfield builds the same environment from
    the sample's Harbor task folder instead, so that warning would mislead: it is dropped."""
    target = logging.getLogger("inspect_ai._eval.task.sandbox")
    if not any(isinstance(f, _LevelfieldBuildsIt) for f in target.filters):
        target.addFilter(_LevelfieldBuildsIt())


class _LevelfieldBuildsIt(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "effective sandbox type is 'levelfield'" not in record.getMessage()


_quiet_the_compose_warning()  # Inspect resolves each sample's sandbox before any task_init
