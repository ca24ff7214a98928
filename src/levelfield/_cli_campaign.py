"""`levelfield campaign`: the same sweep as a new window at each slot of a schedule.

Parse, build the run configuration and the schedule, one library call (`campaign.run_campaign`),
print what happens. `register(app)` adds the command.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from levelfield.campaign import (
    CampaignSpec,
    Event,
    cron_line,
    describe_wait,
    parse_duration,
    run_campaign,
    systemd_units,
)
from levelfield.config import RunConfig

PRINT_FLAGS = ("--print-systemd-timer", "--print-cron", "--once")
err = Console(stderr=True, soft_wrap=True)


def campaign(
    dataset: Annotated[Path, typer.Argument(help="Directory of Harbor-format tasks.")],
    out: Annotated[Path, typer.Option(help="Run directory; the same command resumes it.")],
    every: Annotated[str, typer.Option(help="Time between windows: 6h, 12h, 1d (≥ 1h).")] = "6h",
    windows: Annotated[int, typer.Option(min=1, help="How many windows in all.")] = 8,
    agents: Annotated[str, typer.Option(help="Comma-separated agents.")] = "oracle",
    policies: Annotated[str, typer.Option(help="Comma-separated policies.")] = "strict,3x,uncapped",
    repeats: Annotated[int, typer.Option(min=1, help="Trials per task and configuration.")] = 3,
    concurrency: Annotated[int, typer.Option(min=1, help="Trials in flight at once.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the interleaved order (every window).")] = 0,
    backend: Annotated[str, typer.Option(help="process or oci.")] = "process",
    task: Annotated[list[str] | None, typer.Option(help="Only this task (repeatable).")] = None,
    late_grace: Annotated[
        str | None,
        typer.Option(help="Run a slot that passed while nothing ran up to this late (default: "
                     "one period); later it is recorded as missed."),
    ] = None,
    once: Annotated[
        bool, typer.Option(help="Run only the slot due now, then exit (for a timer or cron).")
    ] = False,
    print_systemd_timer: Annotated[
        bool, typer.Option(help="Print a systemd service + timer that run this campaign.")
    ] = False,
    print_cron: Annotated[bool, typer.Option(help="Print a crontab line instead.")] = False,
    time_scale: Annotated[
        float, typer.Option(hidden=True, help="Virtual seconds per real second (tests).")
    ] = 1.0,
) -> None:
    """Run the same sweep as a new time window every --every, --windows times, sleeping in
    between. Windows are labelled `<UTC date>T<hour>`. Kill it at any point and run the same
    command again: it picks up the schedule and never runs a window twice."""
    every_s = parse_duration(every)
    spec = CampaignSpec(
        every_s,
        windows,
        late_grace_s=parse_duration(late_grace) if late_grace else None,
        time_scale=time_scale,
        once=once,
    )
    if print_systemd_timer or print_cron:
        typer.echo(_schedule_text(every_s, out, systemd=print_systemd_timer))
        return
    config = RunConfig(
        dataset=dataset,
        out=out,
        agents=agents.split(","),
        policies=policies.split(","),
        repeats=repeats,
        concurrency=concurrency,
        seed=seed,
        backend=backend,
        task_names=task,
    )
    signal.signal(signal.SIGTERM, _interrupt)
    run_campaign(config, spec, _run_window, on_event=_announcer(out, windows))


def _run_window(config: RunConfig) -> None:
    from levelfield.cli import _execute

    _execute(config)


def _announcer(out: Path, windows: int) -> Callable[[Event], None]:
    def announce(event: Event) -> None:
        slot = f"window {event.label} (slot {event.index + 1} of {windows})"
        if event.kind == "waiting":
            err.print(f"{slot} starts at {event.at}, in {describe_wait(event.wait_s)}: sleeping; "
                      "safe to stop, the same command picks the schedule up")
        elif event.kind == "running":
            err.print(f"[bold]{slot}[/bold]: running")
        elif event.kind == "done":
            err.print(f"{slot}: done")
        elif event.kind == "next":
            err.print(f"next: {slot} at {event.at}, in {describe_wait(event.wait_s)}")
        elif event.kind == "missed":
            err.print(f"[yellow]{slot} missed[/yellow]: its time passed while no campaign ran")
        elif event.kind == "skipped":
            err.print(f"{slot}: already run")
        elif event.kind == "complete":
            err.print(f"campaign complete; see `levelfield report {out}` (figures by window)")

    return announce


def _schedule_text(every_s: float, out: Path, *, systemd: bool) -> str:
    """The same command with --once instead of the print flags, as the system should run it."""
    args = [a for a in sys.argv[1:] if a not in PRINT_FLAGS]
    argv = [sys.executable, "-m", "levelfield", *args, "--once"]
    workdir = Path.cwd()
    if systemd:
        name = "levelfield-campaign-" + (out.resolve().name or "run")
        return systemd_units(argv, every_s, workdir, name)
    log = out.resolve().parent / f"{out.resolve().name}.campaign.log"  # out may not exist yet
    return cron_line(argv, every_s, workdir, log)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def register(app: typer.Typer) -> None:
    app.command("campaign")(campaign)
