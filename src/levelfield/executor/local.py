"""trials → records on this machine: a thread per trial in flight, admitted by floors.

A trial starts only when its floor fits beside the floors of the trials in flight (host
admission, what a Kubernetes scheduler does with requests). Records are committed from the
calling thread as each trial ends. On Ctrl-C every live sandbox is closed, the trials in flight
are discarded (they rerun on resume), and KeyboardInterrupt propagates; a full run directory
(`_room`) stops the run the same way, with RunDirFull.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from levelfield._room import check_room, is_disk_full, run_dir_full
from levelfield.errors import AdmissionError
from levelfield.plan import Trial
from levelfield.policy import Limits
from levelfield.records import TrialRecord
from levelfield.runner import TrialContext, record_without_sandbox, run_trial
from levelfield.sandbox import Backend
from levelfield.store import Store
from levelfield.telemetry import total_memory_bytes

# What the harness, the kernel and page cache keep for themselves when admitting floors.
HOST_MEMORY_RESERVE_BYTES = 1 << 30

OnTrial = Callable[[TrialRecord], None]


class Admission:
    """Counts guaranteed CPUs and memory of the trials in flight against the host's capacity."""

    def __init__(self, cpus: float, memory_bytes: int) -> None:
        self.cpus, self.memory_bytes = cpus, memory_bytes
        self._used_cpus, self._used_memory, self.in_flight = 0.0, 0, 0
        self._cond = threading.Condition()

    @classmethod
    def for_this_host(cls) -> Admission:
        return cls(float(os.cpu_count() or 1), total_memory_bytes() - HOST_MEMORY_RESERVE_BYTES)

    def _fits(self, limits: Limits) -> bool:
        return (self._used_cpus + limits.cpu_floor <= self.cpus + 1e-9
                and self._used_memory + limits.memory_floor_bytes <= self.memory_bytes)

    @contextlib.contextmanager
    def admit(self, limits: Limits, stop: threading.Event) -> Iterator[None]:
        if limits.cpu_floor > self.cpus or limits.memory_floor_bytes > self.memory_bytes:
            raise AdmissionError(
                f"floor of {limits.cpu_floor:g} CPUs and {limits.memory_floor_bytes >> 20} MiB "
                f"exceeds this host ({self.cpus:g} CPUs, {self.memory_bytes >> 20} MiB admissible)"
            )
        with self._cond:
            while not self._fits(limits):
                if stop.is_set():
                    raise KeyboardInterrupt
                self._cond.wait(timeout=0.2)
            self._used_cpus += limits.cpu_floor
            self._used_memory += limits.memory_floor_bytes
            self.in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._used_cpus -= limits.cpu_floor
                self._used_memory -= limits.memory_floor_bytes
                self.in_flight -= 1
                self._cond.notify_all()


@dataclass
class LocalExecutor:
    backend: Backend
    ctx: TrialContext
    concurrency: int = 1
    admission: Admission | None = None

    def execute(
        self, trials: Sequence[Trial], store: Store, on_trial: OnTrial | None = None
    ) -> int:
        """Run `trials`, committing each record; returns how many were committed."""
        admission = self.admission or Admission.for_this_host()
        self.ctx.in_flight = lambda: admission.in_flight
        stop = threading.Event()
        committed = 0
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency),
                                thread_name_prefix="levelfield-trial") as pool:
            pending: set[Future[TrialRecord]] = {
                pool.submit(self._one, trial, admission, stop) for trial in trials
            }
            try:
                while pending:
                    done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                    check_room(self.ctx.run_dir)  # a trial that ran out of room is not stored
                    for future in done:
                        record = self._result(future)
                        store.commit(record)
                        committed += 1
                        if on_trial:
                            on_trial(record)
            except BaseException:
                stop.set()
                for future in pending:
                    future.cancel()
                self._close_live_sandboxes()
                raise
        return committed

    def _result(self, future: Future[TrialRecord]) -> TrialRecord:
        try:
            return future.result()
        except Exception as exc:
            if is_disk_full(exc):
                raise run_dir_full(self.ctx.run_dir) from exc
            raise

    def _one(self, trial: Trial, admission: Admission, stop: threading.Event) -> TrialRecord:
        if stop.is_set():
            raise KeyboardInterrupt
        check_room(self.ctx.run_dir)
        asked = time.monotonic()
        try:
            with admission.admit(trial.limits, stop):
                waited = time.monotonic() - asked
                return run_trial(trial, self.backend, self.ctx, admission_wait_s=waited)
        except AdmissionError as exc:
            return record_without_sandbox(trial, self.ctx, exc)

    def _close_live_sandboxes(self) -> None:
        for box in list(self.ctx.live):
            with contextlib.suppress(Exception):
                box.close()

