"""The campaign's schedule on a clock the test turns by hand: slots in order, labels by UTC hour,
a slot that passed long ago marked missed, a late one run within the grace, `once` running only
the slot due, a restart with other settings refused. Windows here record their label instead of
running trials; tests/integration/test_campaign.py runs real ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from levelfield.campaign import (
    CampaignSpec,
    cron_line,
    load_state,
    parse_duration,
    run_campaign,
    slot_label,
    systemd_units,
)
from levelfield.config import RunConfig
from levelfield.errors import InputError

HOUR = 3600.0
START = 1_795_911_600.0  # 2026-11-29T00:20:00Z


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _config(tmp_path: Path, **changes: object) -> RunConfig:
    return RunConfig(dataset=tmp_path / "d", out=tmp_path / "run", **changes)  # type: ignore[arg-type]


def test_slots_run_in_order_sleeping_between(tmp_path: Path) -> None:
    clock, ran = FakeClock(START), []
    run_campaign(_config(tmp_path), CampaignSpec(6 * HOUR, 3), lambda c: ran.append(c.window),
                 real=clock, sleep=clock.sleep)
    assert ran == ["2026-11-29T00", "2026-11-29T06", "2026-11-29T12"]
    assert clock.t == START + 12 * HOUR
    state = load_state(tmp_path / "run")
    assert state is not None and set(state.slots.values()) == {"done"}


def test_a_restart_skips_done_windows_runs_late_ones_and_misses_old_ones(tmp_path: Path) -> None:
    clock, ran = FakeClock(START), []
    spec = CampaignSpec(6 * HOUR, 4, late_grace_s=2 * HOUR)
    config = _config(tmp_path)

    def first_then_die(c: RunConfig) -> None:
        ran.append(c.window)
        if len(ran) == 1:
            return
        raise KeyboardInterrupt  # killed while the second window runs

    with pytest.raises(KeyboardInterrupt):
        run_campaign(config, spec, first_then_die, real=clock, sleep=clock.sleep)
    assert load_state(tmp_path / "run").slots == {  # type: ignore[union-attr]
        "2026-11-29T00": "done",
        "2026-11-29T06": "started",
    }
    clock.t = START + 13 * HOUR  # restarted an hour after slot 2 (12 h) was due
    again: list[str] = []
    run_campaign(config, spec, lambda c: again.append(c.window), real=clock, sleep=clock.sleep)
    # the started window resumes, slot 2 is 1 h late (within grace), slot 3 waits for its time
    assert again == ["2026-11-29T06", "2026-11-29T12", "2026-11-29T18"]
    clock.t = START + 40 * HOUR
    spec5 = CampaignSpec(6 * HOUR, 6, late_grace_s=2 * HOUR)
    later: list[str] = []
    run_campaign(config, spec5, lambda c: later.append(c.window), real=clock, sleep=clock.sleep)
    state = load_state(tmp_path / "run")
    assert state is not None and state.slots["2026-11-30T00"] == "missed"
    assert later == []  # slot 5 (30h) is 10 h past: missed too, none left to run
    assert state.slots["2026-11-30T06"] == "missed"


def test_once_runs_only_the_slot_due_now(tmp_path: Path) -> None:
    clock, ran = FakeClock(START), []
    spec = CampaignSpec(6 * HOUR, 8, once=True)
    config = _config(tmp_path)
    run_campaign(config, spec, lambda c: ran.append(c.window), real=clock, sleep=clock.sleep)
    clock.t = START + 6 * HOUR - 40  # the timer fires a little early
    run_campaign(config, spec, lambda c: ran.append(c.window), real=clock, sleep=clock.sleep)
    run_campaign(config, spec, lambda c: ran.append(c.window), real=clock, sleep=clock.sleep)
    assert ran == ["2026-11-29T00", "2026-11-29T06"]  # the third call found it done
    told: list[str] = []
    run_campaign(config, spec, lambda c: None, on_event=lambda e: told.append(
        f"{e.kind} {e.label}"), real=clock, sleep=clock.sleep)
    assert told == ["skipped 2026-11-29T06", "next 2026-11-29T12"]


def test_other_settings_are_refused_on_the_same_directory(tmp_path: Path) -> None:
    clock = FakeClock(START)
    spec = CampaignSpec(6 * HOUR, 1)
    run_campaign(_config(tmp_path), spec, lambda c: None, real=clock, sleep=clock.sleep)
    with pytest.raises(InputError, match="other settings"):
        run_campaign(_config(tmp_path, repeats=5), spec, lambda c: None, real=clock,
                     sleep=clock.sleep)


def test_durations_labels_and_bad_input() -> None:
    assert parse_duration("6h") == 6 * HOUR and parse_duration("1d") == 24 * HOUR
    assert parse_duration("90m") == 5400
    with pytest.raises(InputError):
        parse_duration("six hours")
    with pytest.raises(InputError, match="at least 1h"):
        CampaignSpec(1800, 3)
    assert slot_label(START) == "2026-11-29T00"


def test_system_schedules(tmp_path: Path) -> None:
    argv = ["levelfield", "campaign", "ds dir", "--out", "r", "--once"]
    units = systemd_units(argv, 6 * HOUR, tmp_path, "levelfield-campaign-r")
    assert "OnCalendar=*-*-* 00/6:00:00 UTC" in units and "Persistent=true" in units
    assert "ExecStart=levelfield campaign 'ds dir' --out r --once" in units
    assert "OnUnitActiveSec=18000s" in systemd_units(argv, 5 * HOUR, tmp_path, "x")
    assert cron_line(argv, 6 * HOUR, tmp_path, tmp_path / "log").startswith("0 */6 * * * cd ")
    assert cron_line(argv, 2 * 24 * HOUR, tmp_path, tmp_path / "log").startswith("0 0 */2 * * ")
    with pytest.raises(InputError, match="cron cannot"):
        cron_line(argv, 5 * HOUR, tmp_path, tmp_path / "log")
