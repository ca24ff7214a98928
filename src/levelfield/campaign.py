"""A campaign: the same sweep run again as a new time window at each slot of a schedule.

The study behind docs/design.md recommends running at several times of day and on several days,
since API latency, cluster health and bandwidth move with them. A campaign of N windows every P runs
the sweep at start, start + P, ... start + (N−1)·P, each under the label `<UTC date>T<hour>` of its
slot, with the same plan and order seed, and sleeps in between. Its schedule lives in
`RUN/campaign.json` (written atomically after every change): run the same command again after a
crash, a reboot or kill -9 and it picks the schedule up where it stood. A window is marked `started`
before its first trial and `done` after its last; a started window is resumed (the store skips its
finished trials), a done one is never run again. A slot that passed while nothing ran is run late
within `late_grace_s`, and marked `missed` after that, so the windows stay at their times instead of
bunching up after an outage.

`once` runs only the slot due now (for a systemd timer or cron entry that does the waiting).
`time_scale` compresses the clock for tests: 3600 makes a virtual hour last one real second.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from levelfield.config import RunConfig
from levelfield.errors import InputError, StoreError

STATE_NAME = "campaign.json"
LOCK_NAME = "campaign.lock"
SLEEP_CHUNK_S = 30.0  # wake up this often while waiting, so a changed wall clock is noticed
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """"6h", "30m", "1d", "90s" → seconds; InputError (exit 2) for anything else."""
    match = _DURATION.match(text)
    if not match:
        raise InputError(f"{text!r}: expected a duration such as 6h, 90m, 1d")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True, slots=True)
class CampaignSpec:
    every_s: float
    windows: int
    late_grace_s: float | None = None  # None: one period
    time_scale: float = 1.0  # virtual seconds per real second (tests)
    once: bool = False

    def __post_init__(self) -> None:
        if self.every_s < 3600:
            raise InputError("--every must be at least 1h: windows are labelled by UTC hour")
        if self.windows < 1:
            raise InputError("--windows must be at least 1")
        if self.time_scale <= 0:
            raise InputError("the time scale must be positive")

    @property
    def grace_s(self) -> float:
        return self.every_s if self.late_grace_s is None else self.late_grace_s


@dataclass(frozen=True, slots=True)
class Clock:
    """Virtual time = start + (real − origin) · scale; identity when scale = 1."""

    origin_real: float
    origin_virtual: float
    scale: float = 1.0
    real: Callable[[], float] = time.time

    def now(self) -> float:
        return self.origin_virtual + (self.real() - self.origin_real) * self.scale

    def real_seconds_until(self, virtual_t: float) -> float:
        return max(0.0, (virtual_t - self.now()) / self.scale)


def slot_label(virtual_t: float) -> str:
    return datetime.fromtimestamp(virtual_t, UTC).strftime("%Y-%m-%dT%H")


def _iso(virtual_t: float) -> str:
    return datetime.fromtimestamp(virtual_t, UTC).isoformat(timespec="seconds")


@dataclass
class CampaignState:
    """What `campaign.json` holds: the schedule and where each of its slots stands."""

    identity: str
    start: float  # virtual time of slot 0
    origin_real: float
    every_s: float
    time_scale: float
    slots: dict[str, str] = field(default_factory=dict)  # label → started | done | missed

    def slot_time(self, index: int) -> float:
        return self.start + index * self.every_s


@dataclass(frozen=True, slots=True)
class Event:
    """What the campaign tells its caller: `kind` in waiting, running, done, missed, skipped,
    complete; `at` is the slot's UTC time, `wait_s` the real seconds until it."""

    kind: str
    label: str
    at: str
    wait_s: float = 0.0
    index: int = 0


OnEvent = Callable[[Event], None]
RunWindow = Callable[[RunConfig], Any]


def identity_of(config: RunConfig, spec: CampaignSpec) -> str:
    """The settings a resumed campaign must share with the first invocation (not the count of
    windows, which may be raised to extend it)."""
    settings = config.model_dump(mode="json", exclude={"window", "out"})
    settings.update(every_s=spec.every_s, time_scale=spec.time_scale)
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def run_campaign(
    config: RunConfig,
    spec: CampaignSpec,
    run_window: RunWindow,
    *,
    on_event: OnEvent = lambda event: None,
    real: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> CampaignState:
    """Run every window that is due, sleeping between slots; returns the final state.

    Safe to kill at any point: the next invocation reads the state and carries on."""
    run_dir = config.out.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    with _campaign_lock(run_dir):
        state = _load_or_start(run_dir, config, spec, real)
        clock = Clock(state.origin_real, state.start, state.time_scale, real)
        campaign = _Campaign(run_dir, state, clock, spec, on_event, sleep)
        indices = [_current_index(state, clock)] if spec.once else range(spec.windows)
        for index in indices:
            campaign.slot(index, config, run_window)
        following = next_slot(state, spec, clock.now())
        if following is None:
            on_event(Event("complete", "", _iso(clock.now())))
        elif spec.once:  # the timer will come back for it
            index = round((following - state.start) / state.every_s)
            wait = clock.real_seconds_until(following)
            on_event(Event("next", slot_label(following), _iso(following), wait, index))
        return state


@dataclass
class _Campaign:
    run_dir: Path
    state: CampaignState
    clock: Clock
    spec: CampaignSpec
    on_event: OnEvent
    sleep: Callable[[float], None]

    def slot(self, index: int, config: RunConfig, run_window: RunWindow) -> None:
        """Wait for slot `index`, run its window unless done or missed, announce the next."""
        if index >= self.spec.windows:
            return
        at = self.state.slot_time(index)
        label = slot_label(at)
        status = self.state.slots.get(label)
        if status in ("done", "missed"):
            self._tell("skipped", at, index)
            return
        if status is None:
            if self.clock.now() > at + self.spec.grace_s:
                self._mark(label, "missed")
                self._tell("missed", at, index)
                return
            self._wait_for(at, index)
        self._mark(label, "started")
        self._tell("running", at, index)
        run_window(config.model_copy(update={"window": label}))
        self._mark(label, "done")
        self._tell("done", at, index)
        if index + 1 < self.spec.windows and not self.spec.once:
            following = self.state.slot_time(index + 1)
            self._tell("next", following, index + 1, self.clock.real_seconds_until(following))

    def _wait_for(self, at: float, index: int) -> None:
        wait = self.clock.real_seconds_until(at)
        if wait <= 0:
            return
        self._tell("waiting", at, index, wait)
        while wait > 0:
            self.sleep(min(wait, SLEEP_CHUNK_S))
            wait = self.clock.real_seconds_until(at)

    def _mark(self, label: str, status: str) -> None:
        self.state.slots[label] = status
        _save(self.run_dir, self.state)

    def _tell(self, kind: str, at: float, index: int, wait_s: float = 0.0) -> None:
        self.on_event(Event(kind, slot_label(at), _iso(at), wait_s, index))


def _current_index(state: CampaignState, clock: Clock) -> int:
    """The slot whose time is nearest now: a timer firing a little early or late still hits it."""
    return max(0, round((clock.now() - state.start) / state.every_s))


def next_slot(state: CampaignState, spec: CampaignSpec, now_virtual: float) -> float | None:
    for index in range(spec.windows):
        at = state.slot_time(index)
        if state.slots.get(slot_label(at)) is None and at + spec.grace_s >= now_virtual:
            return at
    return None


def _load_or_start(
    run_dir: Path, config: RunConfig, spec: CampaignSpec, real: Callable[[], float]
) -> CampaignState:
    identity = identity_of(config, spec)
    path = run_dir / STATE_NAME
    if path.exists():
        try:
            state = CampaignState(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise StoreError(f"{path}: unreadable campaign state: {exc}") from exc
        if state.identity != identity:
            raise InputError(
                f"{run_dir} holds a campaign with other settings (agents, policies, dataset, "
                "--every, ...): run the same command as before, or use another --out"
            )
        return state
    now = real()
    state = CampaignState(identity, now, now, spec.every_s, spec.time_scale)
    _save(run_dir, state)
    return state


def _save(run_dir: Path, state: CampaignState) -> None:
    """Write-then-rename, so a kill mid-write leaves the previous state, never half of one."""
    path = run_dir / STATE_NAME
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state.__dict__, indent=2, sort_keys=True))
    os.replace(tmp, path)


@contextlib.contextmanager
def _campaign_lock(run_dir: Path) -> Iterator[None]:
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"{run_dir}: another campaign is running on this directory") from None
        yield
    finally:
        os.close(fd)


def load_state(run_dir: Path) -> CampaignState | None:
    path = run_dir / STATE_NAME
    if not path.exists():
        return None
    return CampaignState(**json.loads(path.read_text()))


# -- letting the system schedule it ------------------------------------------------------------


def systemd_units(argv: list[str], every_s: float, workdir: Path, name: str) -> str:
    """A oneshot service running `argv` (which carries --once) and the timer that fires it."""
    hours = every_s / 3600
    if hours.is_integer() and 24 % int(hours) == 0:
        when = f"OnCalendar=*-*-* 00/{int(hours)}:00:00 UTC"
    else:
        when = f"OnActiveSec=0\nOnUnitActiveSec={int(every_s)}s"
    return "\n".join([
        f"# /etc/systemd/system/{name}.service",
        "[Unit]",
        f"Description=levelfield campaign window ({name})",
        "",
        "[Service]",
        "Type=oneshot",
        f"WorkingDirectory={workdir}",
        f"ExecStart={shlex.join(argv)}",
        "",
        f"# /etc/systemd/system/{name}.timer",
        "[Unit]",
        f"Description=levelfield campaign schedule ({name})",
        "",
        "[Timer]",
        when,
        "Persistent=true",
        "AccuracySec=1min",
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
        f"# then: systemctl daemon-reload && systemctl enable --now {name}.timer",
    ])


def cron_line(argv: list[str], every_s: float, workdir: Path, log: Path) -> str:
    """A crontab entry; cron has no "every P from now", so P must divide a day (or be days)."""
    hours = every_s / 3600
    if hours.is_integer() and 24 % int(hours) == 0:
        when = "0 * * * *" if hours == 1 else f"0 */{int(hours)} * * *"
    elif (hours / 24).is_integer():
        when = f"0 0 */{int(hours / 24)} * *"
    else:
        raise InputError(
            f"cron cannot fire every {hours:g}h: use an interval that divides a day, "
            "or --print-systemd-timer"
        )
    where, logged = shlex.quote(str(workdir)), shlex.quote(str(log))
    return f"{when} cd {where} && {shlex.join(argv)} >> {logged} 2>&1"


def describe_wait(seconds: float) -> str:
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    delta = timedelta(seconds=round(seconds))
    hours, rest = divmod(delta.total_seconds(), 3600)
    return f"{int(hours)} h {int(rest // 60)} min" if hours else f"{int(rest // 60)} min"
