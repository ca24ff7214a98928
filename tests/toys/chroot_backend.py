"""`chroot`: each phase in a fresh bubblewrap root of the host's system directories, with the
task's /app, /tests and /logs bound from the trial directory. No limits, no evidence: a toy."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import ClassVar

from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.records import Evidence, ImageRecord, PhaseResult
from levelfield.sandbox import (
    BackendOptions,
    Enforcement,
    Observables,
    ReadOnlyMount,
    Usage,
    trees,
)
from levelfield.sandbox._bwrap import system_binds
from levelfield.tasks import Task


class ChrootSandbox:
    image: ImageRecord | None = None

    def __init__(self, task: Task, root: Path) -> None:
        self.task = task
        self.secrets = Masker()  # what the runner adds to; a toy's logs are not masked
        self.dirs = {
            task.workdir: root / "app",
            PurePosixPath("/tests"): root / "tests",
            PurePosixPath("/logs"): root / "logs",
        }
        for path in self.dirs.values():
            path.mkdir(parents=True)
        (root / "logs" / "verifier").mkdir()

    def host_path(self, path: PurePosixPath) -> Path:
        for inside, outside in self.dirs.items():
            if path.is_relative_to(inside):
                return outside / path.relative_to(inside)
        raise ValueError(f"{path} is outside the toy sandbox's binds")

    def exec(
        self,
        command: str,
        *,
        timeout_s: float,
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> PhaseResult:
        argv = ["bwrap", *system_binds(), "--proc", "/proc", "--dev", "/dev", "--unshare-pid"]
        for inside, outside in self.dirs.items():
            argv += ["--bind", str(outside), str(inside)]
        argv += ["--chdir", str(self.task.workdir), "bash", "-c", command]
        started = time.monotonic()
        with open(log_path, "ab") as log:
            try:
                code = subprocess.run(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=dict(env or {}),
                    timeout=timeout_s, check=False,
                ).returncode
            except subprocess.TimeoutExpired:
                return PhaseResult(timed_out=True, duration_s=time.monotonic() - started)
        return PhaseResult(exit_code=code, duration_s=time.monotonic() - started)

    def copy_in(self, src: Path, dest: PurePosixPath) -> None:
        trees.copy_in(src, *self._split(dest))

    def read_file(self, path: PurePosixPath) -> bytes | None:
        found = self.read_entry(path, max_bytes=1 << 20)
        return found.data if found.kind == "file" else None

    # What the agent could have touched, read by the same rules as every backend (trees.py).
    def read_entry(self, path: PurePosixPath, *, max_bytes: int) -> trees.Entry:
        return trees.read_entry(*self._split(path), max_bytes=max_bytes)

    def digests(self, path: PurePosixPath) -> dict[str, str]:
        return trees.digests(*self._split(path))

    def renew_dir(self, path: PurePosixPath, *, keep_in: Path) -> tuple[str, ...]:
        return trees.renew_dir(*self._split(path), keep_in)

    def _split(self, path: PurePosixPath) -> tuple[Path, PurePosixPath]:
        for inside, outside in self.dirs.items():
            if path.is_relative_to(inside):
                return outside, PurePosixPath(path.relative_to(inside))
        raise ValueError(f"{path} is outside the toy sandbox's binds")

    def usage(self) -> Usage:
        return Usage(memory_bytes=0, cpu_usage_s=0.0)

    def evidence(self) -> Evidence:
        return Evidence(notes=("toy backend: no kernel evidence",))

    def collect_logs(self, dest: Path) -> tuple[str, ...]:
        shutil.copytree(self.dirs[PurePosixPath("/logs")], dest, symlinks=True, dirs_exist_ok=True)
        return ()

    def observables(self) -> Observables:
        return Observables()

    def network_namespace(self) -> Path | None:
        return None

    def grader_view(self, scratch: Path) -> None:
        """A toy: its grader runs in the sandbox, as where an engine is remote."""
        return None

    def close(self) -> None:
        pass


class ChrootBackend:
    name: ClassVar[str] = "chroot"

    def __init__(self, options: BackendOptions) -> None:
        self.options = options

    def enforcement(self) -> Enforcement:
        none = "none (toy)"
        return Enforcement(none, none, none, none, none, none, "bubblewrap root, host system")

    def check(self) -> list[str]:
        return [] if shutil.which("bwrap") else ["bubblewrap (bwrap) is not installed"]

    def start(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        mounts: Sequence[ReadOnlyMount] = (),
        secrets: object = None,  # a toy writes no log that would need masking
    ) -> ChrootSandbox:
        return ChrootSandbox(task, trial_dir / "chroot")

    def reap(self, run_id: str) -> int:
        return 0


def create(options: BackendOptions) -> ChrootBackend:
    return ChrootBackend(options)
