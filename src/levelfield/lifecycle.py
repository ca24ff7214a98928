"""One trial's sandbox from start to record, the same for every path that runs one: the native
runner (`runner.py`) and a sandbox another harness drives (`hosted/sandbox.py`).

Start the backend under the trial's limits, with the telemetry sampler and the watch (network
per phase, host health) beside it; time each phase; read the kernel's evidence before the
sandbox closes (the counters vanish with its cgroup); assemble the telemetry; and write the one
record type, a `TrialRecord`, masked, as `record.json`. What happens between start and end (the
phases themselves, the verdict) is the caller's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path

from levelfield.masking import Masker
from levelfield.policy import Limits
from levelfield.records import Evidence, HostContext, Telemetry, TrialRecord
from levelfield.sandbox import Backend, ReadOnlyMount, Sandbox, trial_roots
from levelfield.tasks import Task
from levelfield.telemetry import Sampler, TrialWatch


class TrialLife:
    """`start` → phases, each begun with `mark` → `end` (evidence, then close) → `telemetry`
    → `write`. Thread-safe marks: a hosted harness may exec from several threads."""

    def __init__(
        self,
        task: Task,
        limits: Limits,
        *,
        trial_id: str,
        trial_dir: Path,
        secrets: Masker,
        watch: TrialWatch | None = None,
    ) -> None:
        self.task, self.limits, self.trial_id, self.trial_dir = task, limits, trial_id, trial_dir
        self.secrets = secrets
        self.watch = watch or TrialWatch()
        self.started = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.phase_s: dict[str, float] = {}
        self.box: Sandbox | None = None
        self.sampler: Sampler | None = None
        self._stack = ExitStack()
        self._phase, self._phase_t = "start", self.t0
        self._lock = threading.Lock()

    def start(self, backend: Backend, mounts: Sequence[ReadOnlyMount] = ()) -> Sandbox:
        trial_roots.mark(self.trial_dir.parent)  # hidden from other runs' sandboxes (if not yet)
        box = backend.start(
            self.task,
            self.limits,
            trial_id=self.trial_id,
            trial_dir=self.trial_dir,
            mounts=mounts,
            secrets=self.secrets,
        )
        self.box = box
        try:
            self.sampler = self._stack.enter_context(Sampler(box))
            self._stack.enter_context(self.watch.begin(box))
        except BaseException:
            self._stack.close()
            box.close()
            raise
        return box

    def mark(self, phase: str, *, meter: bool = True) -> None:
        """`phase` begins: the one before it ends here. `meter`: the network meter books what
        moves from now on to `phase` (a phase it does not tell apart leaves it as it is)."""
        with self._lock:
            now = time.monotonic()
            if phase == self._phase:
                return
            self.phase_s[self._phase] = round(now - self._phase_t, 3)
            self._phase, self._phase_t = phase, now
        if meter and phase != "done":
            self.watch.mark(phase)

    @property
    def phase(self) -> str:
        return self._phase

    def end(self, before_close: Callable[[Sandbox], None] = lambda box: None) -> Evidence:
        """The evidence, read while the counters exist; then `before_close` (what must still
        see the sandbox: its logs), then the sampler, the watch and the sandbox close."""
        box = self.box
        if box is None:
            return Evidence(sandbox_alive=False)
        self.box = None
        try:
            evidence = box.evidence()
            self.watch.finish()
            before_close(box)
        finally:
            try:
                self._stack.close()
            finally:
                box.close()
        return evidence

    def telemetry(self, host: HostContext) -> Telemetry:
        sampler = self.sampler
        telemetry = Telemetry(
            host=host,
            samples=tuple(sampler.samples if sampler else ()),
            phase_s=dict(self.phase_s),
            sample_every_s=sampler.every_s if sampler else 0.0,
        )
        return self.watch.add_to(telemetry)

    def elapsed(self) -> tuple[str, str, float]:
        """(started, finished, seconds), as a record keeps them."""
        finished = datetime.now(UTC)
        return (
            self.started.isoformat(timespec="milliseconds"),
            finished.isoformat(timespec="milliseconds"),
            round(time.monotonic() - self.t0, 3),
        )

    def write(self, record: TrialRecord, directory: Path) -> TrialRecord:
        """The record, masked, as `directory/record.json`; the masked record is returned."""
        masked = self.secrets.record(record)
        (directory / "record.json").write_text(masked.model_dump_json(indent=2))
        return masked
