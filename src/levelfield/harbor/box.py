"""A hosted levelfield sandbox (`hosted/sandbox.py`) serving one Harbor trial: Harbor's exec,
uploads and downloads on it, its record at `<trial>/levelfield/record.json`.

No Harbor import here (`environment.py` adapts this to Harbor's async API), so that it runs and is
tested on any Python levelfield supports. A kill the exec survived is raised by `stop` when the
trial did not pass; Harbor stops the environment after grading, before it writes result.json.
Once a ceiling hit was raised, the upload of /tests that starts Harbor's verifier is refused with
the same hit: the kill ended the trial, and no grader may give it a verdict, whichever Harbor
version runs it and whatever the job's error policy says of the exception's type.
"""

from __future__ import annotations

import io
import os
import shlex
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from levelfield.errors import CeilingHit, SandboxError
from levelfield.harbor import leftovers
from levelfield.harbor.options import EnvironmentOptions
from levelfield.harbor.record import RECORD_DIR
from levelfield.hosted.commands import ExecCall, ceiling_hit, shell_command
from levelfield.hosted.sandbox import HostedSandbox, Hosting
from levelfield.policy import Policy
from levelfield.sandbox import Sandbox, trees, trial_roots
from levelfield.tasks import Task

__all__ = ["ExecCall", "HarborBox", "ceiling_hit", "shell_command"]

TESTS_DIR = PurePosixPath("/tests")  # its upload starts the verifier's phase
LOGS_DIR = PurePosixPath("/logs")
VERIFIER_DIR = LOGS_DIR / "verifier"


class HarborBox(HostedSandbox):
    """Started by `start`, closed by `stop`, which writes the levelfield record beside Harbor's
    result. Thread-safe for Harbor's concurrent execs within the trial."""

    def __init__(
        self, task: Task, policy: Policy, options: EnvironmentOptions, trial_dir: Path
    ) -> None:
        hosting = Hosting(
            backend=options.backend,
            record_dir=trial_dir / RECORD_DIR,
            trial_name=trial_dir.name,
            run_prefix=leftovers.RUN_PREFIX,
            uv_shim=options.uv_shim,
        )
        super().__init__(task, policy, hosting)
        self.options, self.trial_dir = options, trial_dir
        trial_roots.mark(trial_dir.parent)  # the job's folder: every trial of it, marked once

    def stop(self, reward: float | None) -> CeilingHit | None:
        """Close the sandbox and write the record. Returns the ceiling hit to raise when one
        was survived by its exec but the trial did not pass (`reward` below 1 or none)."""
        return self.close(passed=reward is not None and reward >= 1.0, reward=reward)

    def exec(self, call: ExecCall, number: int | None = None) -> tuple[str, int]:
        """(output, exit code), stdout and stderr merged as Harbor's docker environment does.
        Raises the CeilingHit of a failed exec, and Harbor's own RuntimeError on a timeout."""
        done = self.run(call, number)
        if done.timed_out:
            raise RuntimeError(f"Command timed out after {call.timeout_s} seconds")
        return done.output, done.exit_code

    # -- files ------------------------------------------------------------------------------

    def upload_file(self, source: Path, target: str) -> None:
        self.put(Path(source), PurePosixPath(target))

    def upload_dir(self, source: Path, target: str) -> None:
        """Into what is there, as `docker cp` does. /tests starts the verifier's phase: the
        grader then stands apart (`hosted/sandbox.py`), and /tests is on its disk alone."""
        box, dest = self._require(), PurePosixPath(target)
        if dest == TESTS_DIR:
            if self.ended_by is not None:
                raise self.ended_by  # the ceiling ended the trial: nothing is left to grade
            first = not self.grading
            self.begin_grading()
            self.put(Path(source), dest, merge=not first)
            return
        packed = self.dir / f"upload-{self.number()}.tar"
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
        found = self.entry(PurePosixPath(source), max_bytes=trees.READ_MAX_BYTES)
        data = found.data if found.kind == "file" else None
        if data is None:
            raise FileNotFoundError(f"{source} not found in the sandbox")
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        Path(target).write_bytes(data)

    def download_dir(self, source: str, target: Path) -> None:
        """/logs/* from the host side (no exec, no room needed on a full disk); else by tar."""
        box, src, dest = self._require(), PurePosixPath(source), Path(target)
        dest.mkdir(parents=True, exist_ok=True)
        if src == VERIFIER_DIR and self.keep_grader_logs(dest):
            return
        if src == LOGS_DIR or LOGS_DIR in src.parents:
            with tempfile.TemporaryDirectory() as tmp:
                box.collect_logs(Path(tmp))
                found = Path(tmp) / src.relative_to(LOGS_DIR)
                if found.is_dir():
                    _copy_tree(found, dest)
            return
        packed = PurePosixPath("/tmp") / f".levelfield-download-{self.number()}.tar"
        output, code = self.exec(
            ExecCall(f"tar -cf {packed} -C {shlex.quote(source)} .", user="root")
        )
        data = box.read_file(packed) if code == 0 else None
        self.exec(ExecCall(f"rm -f {packed}", user="root"))
        if data is None:
            raise SandboxError(f"download of {source} failed ({code}): {output[-500:]}")
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")

    def _require(self) -> Sandbox:
        return self.sandbox()


def _copy_tree(source: Path, dest: Path) -> None:
    """Regular files and directories only: a link the agent left is not followed on the host."""
    for directory, _dirs, files in os.walk(source):  # never into a linked directory
        here = Path(directory)
        (dest / here.relative_to(source)).mkdir(parents=True, exist_ok=True)
        for name in files:
            path = here / name
            if path.is_file() and not path.is_symlink():
                (dest / path.relative_to(source)).write_bytes(path.read_bytes())
