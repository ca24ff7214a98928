"""The sampler beside a trial, and the host context it started in.

Samples memory and CPU of the trial's cgroup a few times a second; the series is thinned (every
other point dropped) whenever it reaches MAX_SAMPLES, so a long trial costs bounded memory and
storage while keeping its shape. Peak memory comes from the kernel's own high-water mark, not
from these samples, which can miss a short spike.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from levelfield.health import HealthSnapshot, health_between, snapshot
from levelfield.network import NetworkMeter
from levelfield.records import Health, HostContext, Sample, Telemetry
from levelfield.sandbox import Sandbox

SAMPLE_EVERY_S = 0.5  # budget: under 1 % of a core; benchmarks/sandbox_overhead.py checks it
MAX_SAMPLES = 600


def host_id() -> str:
    """Stable per machine, not the raw machine-id (which is meant to stay private)."""
    with contextlib.suppress(OSError):
        machine = Path("/etc/machine-id").read_text().strip()
        if machine:
            return f"{socket.gethostname()}-{hashlib.sha256(machine.encode()).hexdigest()[:8]}"
    return socket.gethostname()


def available_memory_bytes() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def total_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_context(trials_in_flight: int, node: str | None = None) -> HostContext:
    now = datetime.now(UTC)
    return HostContext(
        host_id=host_id(),
        started_at=now.isoformat(timespec="milliseconds"),
        local_hour=datetime.now().hour,
        load1=os.getloadavg()[0],
        free_memory_bytes=available_memory_bytes(),
        trials_in_flight=trials_in_flight,
        node=node,
    )


class Sampler:
    """A daemon thread reading `box.usage()`; use as a context manager around the phases."""

    def __init__(self, box: Sandbox, every_s: float = SAMPLE_EVERY_S) -> None:
        self.box, self.every_s = box, every_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="levelfield-sampler", daemon=True)
        self._t0 = time.monotonic()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._take()  # a last reading, after the final phase

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._take()

    def _take(self) -> None:
        try:
            usage = self.box.usage()
        except Exception:  # a sandbox that died mid-read ends the series, not the trial
            return
        sample = Sample(
            t_s=round(time.monotonic() - self._t0, 3),
            memory_bytes=usage.memory_bytes,
            cpu_usage_s=round(usage.cpu_usage_s, 4),
        )
        self.samples.append(sample)
        if len(self.samples) >= MAX_SAMPLES:
            self.samples = self.samples[::2]
            self.every_s *= 2


class TrialWatch:
    """Beside the sampler: the trial's own network traffic per phase and the host's health over
    the trial. `begin` once the sandbox runs, `mark` at each phase, `finish` before the sandbox's
    cgroup goes (its pressure files go with it), then `add_to` the telemetry."""

    def __init__(self, admission_wait_s: float | None = None) -> None:
        self.admission_wait_s = admission_wait_s
        self.meter: NetworkMeter | None = None
        self._pressure_dir: Path | None = None
        self._start: HealthSnapshot | None = None
        self._end: HealthSnapshot | None = None

    def begin(self, box: Sandbox) -> NetworkMeter:
        seen = box.observables()
        self._pressure_dir = seen.pressure_dir
        self._start = snapshot(seen.pressure_dir)
        self.meter = NetworkMeter(seen.network_pid)
        return self.meter

    def mark(self, phase: str) -> None:
        if self.meter is not None:
            self.meter.mark(phase)

    def finish(self) -> None:
        if self._start is not None:
            self._end = snapshot(self._pressure_dir)

    def add_to(self, telemetry: Telemetry) -> Telemetry:
        health = None
        if self._start is not None and self._end is not None:
            health = health_between(
                self._start, self._end, admission_wait_s=self.admission_wait_s
            )
        elif self.admission_wait_s is not None:
            health = Health(admission_wait_s=round(self.admission_wait_s, 4))
        network = self.meter.uses() if self.meter is not None else {}
        return telemetry.model_copy(update={"network": network, "health": health})
