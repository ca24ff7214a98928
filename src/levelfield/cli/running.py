"""The running commands: `run`, `sweep` (fixed or adaptive) and `campaign` (the same sweep as a new
window at each slot of a schedule). Each parses, builds a `RunConfig` and hands it to
`_execute`; nothing here runs a trial itself."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from levelfield.cli._console import bad_input, console, err, load_run_dir, show_adaptive_sections
from levelfield.cli._execute import execute, execute_adaptive, stop_on_sigterm
from levelfield.cli._options import (
    DISCLOSE_HELP,
    EXECUTOR_HELP,
    INSTALL_MODE_HELP,
    RAY_ADDRESS_HELP,
    Agents,
    Backend,
    Concurrency,
    Dataset,
    Image,
    MaxCost,
    MaxTokens,
    MaxTrials,
    OrderSeed,
    Out,
    PilotRepeats,
    Policies,
    Prices,
    Repeats,
    Target,
    TargetCi,
    Tasks,
    UvShim,
    choice,
    key_values,
)

if TYPE_CHECKING:  # imported where they are used: `levelfield report` need not load them
    from levelfield.campaign import Event

PRINT_FLAGS = ("--print-systemd-timer", "--print-cron", "--once")


def run(
    dataset: Dataset,
    out: Out,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            help="oracle, nop, replay:NAME (the task's trajectories/NAME.json), replay:FILE, "
            "population (a trajectory drawn per trial from trajectories/population.toml), "
            "terminal, command, claude-code, codex or gemini-cli."
        ),
    ] = None,
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help="strict (1x/1x), headroom (1x/3x), uncapped (1x/none), a multiplier (2.5x = "
            "floor 1x, ceiling 2.5x) or FLOOR/CEILING. Repeat for several."
        ),
    ] = None,
    floor: Annotated[
        str | None, typer.Option(help="Floor on every resource: 1x, 4g, 2cpu; alone: no ceiling.")
    ] = None,
    ceiling: Annotated[
        str | None,
        typer.Option(help="Ceiling on every resource; none = uncapped; alone: floor 1x."),
    ] = None,
    repeats: Repeats = 1,
    concurrency: Concurrency = 1,
    backend: Backend = "auto",
    image: Image = "auto",
    uv_shim: UvShim = False,
    seed: OrderSeed = 0,
    window: Annotated[
        str, typer.Option(help="Label of this invocation's time window.")
    ] = "default",
    task: Tasks = None,
    model: Annotated[
        str | None, typer.Option(help="Model for terminal, claude-code, codex, gemini-cli.")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            help="Model endpoint: OpenAI-compatible for the terminal agent (vLLM, llama.cpp, "
            "Ollama); a CLI agent gets it in its own base-URL variable."
        ),
    ] = None,
    agent_install: Annotated[
        str | None, typer.Option(help="command agent: shell command installing it in the sandbox.")
    ] = None,
    agent_cmd: Annotated[
        str | None,
        typer.Option(
            help="command agent: shell command running it; the instruction is in "
            "$LEVELFIELD_INSTRUCTION."
        ),
    ] = None,
    agent_name: Annotated[str | None, typer.Option(help="command agent: its label.")] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(
            help="Environment variable with the API key (default per agent: ANTHROPIC_API_KEY, "
            "OPENAI_API_KEY or GEMINI_API_KEY). The key stays in the harness: the agent gets the "
            "proxy's URL and a dummy token. Masked in everything the run writes."
        ),
    ] = None,
    api_key_file: Annotated[Path | None, typer.Option(help="File with the API key.")] = None,
    max_turns: Annotated[int, typer.Option(min=1, help="terminal agent: model calls.")] = 30,
    agent_install_mode: Annotated[str, typer.Option(help=INSTALL_MODE_HELP)] = "sandbox",
    agent_version: Annotated[
        str | None, typer.Option(help="CLI agent: npm version to install (default latest).")
    ] = None,
    agent_setup_timeout: Annotated[
        float, typer.Option(min=1, help="CLI agent: seconds for its agent_setup phase.")
    ] = 600.0,
    agent_env: Annotated[
        list[str] | None, typer.Option(help="CLI agent: extra KEY=VALUE in its environment.")
    ] = None,
    agent_network: Annotated[
        bool,
        typer.Option(
            "--agent-network",
            help="CLI agent: the outside network whatever the task says. Off: a command agent "
            "without --agent-install has the network its task allows; its model calls go "
            "through the proxy on the sandbox's own loopback either way."
        ),
    ] = False,
    disclose_limits: Annotated[str, typer.Option(help=DISCLOSE_HELP)] = "off",
    config: Annotated[Path | None, typer.Option(help="run.toml with the same keys.")] = None,
    executor: Annotated[str | None, typer.Option(help=EXECUTOR_HELP)] = None,
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
    prices: Prices = None,
    max_tokens_per_trial: MaxTokens = None,
    max_cost_per_trial: MaxCost = None,
) -> None:
    """Run every task under each policy. Safe to interrupt: run the same command to resume."""
    from levelfield.agents import AgentOptions
    from levelfield.config import RunConfig, load_run_config
    from levelfield.records import ModelBudget

    choice(agent_install_mode, ("sandbox", "mounted"), "--agent-install-mode")
    choice(disclose_limits, ("off", "on", "both"), "--disclose-limits")
    agent_options = AgentOptions(
        model=model,
        base_url=base_url,
        install=agent_install,
        command=agent_cmd,
        name=agent_name,
        api_key_env=api_key_env,
        api_key_file=api_key_file,
        max_turns=max_turns,
        install_mode=agent_install_mode,  # type: ignore[arg-type]
        agent_version=agent_version,
        setup_timeout_s=agent_setup_timeout,
        agent_env=key_values(agent_env or []),
        budget=ModelBudget(max_tokens=max_tokens_per_trial, max_cost_usd=max_cost_per_trial),
        network=agent_network,
    )
    options = dict(
        dataset=dataset,
        out=out,
        agents=agent,
        policies=policy,
        floor=floor,
        ceiling=ceiling,
        repeats=repeats,
        concurrency=concurrency,
        backend=backend,
        image=image,
        uv_shim=uv_shim or None,
        seed=seed,
        window=window,
        task_names=task,
        agent_options=agent_options,
        executor=executor,
        ray_address=ray_address,
        prices=prices,
        disclose_limits=disclose_limits,
    )
    cfg = (
        load_run_config(config, **options)
        if config
        else RunConfig.model_validate({k: v for k, v in options.items() if v is not None})
    )
    execute(cfg)


def sweep(
    dataset: Dataset,
    out: Out,
    agents: Agents = "oracle",
    policies: Policies = "strict,3x,uncapped",
    repeats: Repeats = 3,
    concurrency: Concurrency = 1,
    concurrency_levels: Annotated[
        str | None, typer.Option(help="Trials in flight as a factor of the design, e.g. 1,2.")
    ] = None,
    window: Annotated[
        str,
        typer.Option(
            help="Time-window label: the same sweep run again later "
            "under a new label adds a window."
        ),
    ] = "default",
    seed: OrderSeed = 0,
    backend: Backend = "auto",
    image: Image = "auto",
    uv_shim: UvShim = False,
    html: Annotated[Path | None, typer.Option(help="Also write the HTML report here.")] = None,
    report: Annotated[bool, typer.Option(help="Print the report when done.")] = True,
    executor: Annotated[str, typer.Option(help=EXECUTOR_HELP)] = "local",
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
    target_ci: TargetCi = None,
    target: Target = "score",
    max_trials: MaxTrials = None,
    pilot_repeats: PilotRepeats = 2,
    prices: Prices = None,
    model: Annotated[
        str | None, typer.Option(help="Model for terminal, claude-code, codex.")
    ] = None,
    base_url: Annotated[
        str | None, typer.Option(help="terminal: OpenAI-compatible endpoint.")
    ] = None,
    disclose_limits: Annotated[str, typer.Option(help=DISCLOSE_HELP)] = "off",
    max_tokens_per_trial: MaxTokens = None,
    max_cost_per_trial: MaxCost = None,
) -> None:
    """Every agent under every policy, interleaved in a seeded order; then the report. With
    --target-ci, adaptively: a pilot, then repeats where the CI needs them, until it is narrow."""
    from levelfield.agents import AgentOptions
    from levelfield.config import RunConfig
    from levelfield.records import ModelBudget

    choice(disclose_limits, ("off", "on", "both"), "--disclose-limits")
    levels = [int(x) for x in concurrency_levels.split(",")] if concurrency_levels else None
    cfg = RunConfig(
        dataset=dataset,
        out=out,
        agents=agents.split(","),
        policies=policies.split(","),
        repeats=repeats,
        concurrency=concurrency,
        concurrency_levels=levels,
        window=window,
        seed=seed,
        backend=backend,
        image=image,  # type: ignore[arg-type]
        uv_shim=uv_shim,
        executor=executor,
        ray_address=ray_address,
        prices=prices,
        agent_options=AgentOptions(
            model=model,
            base_url=base_url,
            budget=ModelBudget(max_tokens=max_tokens_per_trial, max_cost_usd=max_cost_per_trial),
        ),
        disclose_limits=disclose_limits,  # type: ignore[arg-type]
    )
    if target_ci:
        execute_adaptive(cfg, target_ci, target, max_trials, pilot_repeats)
    else:
        execute(cfg)
    if report or html:
        _report_sweep(out, html, show=report, seed=seed)


def _report_sweep(out: Path, html: Path | None, *, show: bool, seed: int) -> None:
    """The sweep's answer right after it: the summary on the terminal and/or the HTML page."""
    from levelfield.analysis.summary import summarize
    from levelfield.report import render_html, show_summary

    data = load_run_dir(out)
    with bad_input():
        summary = summarize(data.trials, info=data.info, seed=seed)
    if show:
        show_summary(summary, console)
        show_adaptive_sections(data, console)
    if html is not None:
        html.write_text(render_html(summary), encoding="utf-8")
        err.print(f"wrote {html}")


def campaign(
    dataset: Dataset,
    out: Out,
    every: Annotated[str, typer.Option(help="Time between windows: 6h, 12h, 1d (≥ 1h).")] = "6h",
    windows: Annotated[int, typer.Option(min=1, help="How many windows in all.")] = 8,
    agents: Agents = "oracle",
    policies: Policies = "strict,3x,uncapped",
    repeats: Repeats = 3,
    concurrency: Concurrency = 1,
    seed: OrderSeed = 0,
    backend: Backend = "auto",
    image: Image = "auto",
    uv_shim: UvShim = False,
    task: Tasks = None,
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
    from levelfield.campaign import CampaignSpec, parse_duration, run_campaign
    from levelfield.config import RunConfig

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
        image=image,  # type: ignore[arg-type]
        uv_shim=uv_shim,
        task_names=task,
    )
    stop_on_sigterm()
    run_campaign(config, spec, execute, on_event=_announcer(out, windows))


def _announcer(out: Path, windows: int) -> Callable[[Event], None]:
    from levelfield.campaign import describe_wait

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
    from levelfield.campaign import cron_line, systemd_units

    args = [a for a in sys.argv[1:] if a not in PRINT_FLAGS]
    argv = [sys.executable, "-m", "levelfield", *args, "--once"]
    workdir = Path.cwd()
    if systemd:
        name = "levelfield-campaign-" + (out.resolve().name or "run")
        return systemd_units(argv, every_s, workdir, name)
    log = out.resolve().parent / f"{out.resolve().name}.campaign.log"  # out may not exist yet
    return cron_line(argv, every_s, workdir, log)


def register(app: typer.Typer) -> None:
    """Add `run`, `sweep` and `campaign`."""
    app.command()(run)
    app.command()(sweep)
    app.command()(campaign)
