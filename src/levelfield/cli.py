"""The `levelfield` command: a thin typer layer, one library call per command."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

from levelfield._cli_adaptive import MaxTrials, PilotRepeats, Prices, Target, TargetCi
from levelfield.agents import AgentOptions
from levelfield.config import RunConfig, load_run_config
from levelfield.errors import InputError, LevelfieldError

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    help="Run agentic benchmarks under an explicit resource floor and ceiling, "
    "with kernel-evidenced outcomes and honest error bars.",
)
tasks_app = typer.Typer(no_args_is_help=True, help="Inspect and validate task directories.")
app.add_typer(tasks_app, name="tasks")
import_app = typer.Typer(no_args_is_help=True, help="Bring other harnesses' results in.")
app.add_typer(import_app, name="import")
images_app = typer.Typer(no_args_is_help=True, help="Container images for the oci backend.")
app.add_typer(images_app, name="images")
# Tables are wide; piped output (CI logs, files) gets room instead of rich's default 80 columns.
console = Console(width=None if Console().is_terminal else 200)
err = Console(stderr=True, soft_wrap=True)

Dataset = Annotated[Path, typer.Argument(help="Directory of Harbor-format tasks (or one task).")]
UV_SHIM_HELP = (
    "oci: place uv/uvx (from the PyPI wheel) in the container before the verifier, "
    "for machines where test.sh cannot download it; see `levelfield images`."
)
RunDir = Annotated[Path, typer.Argument(help="A run directory written by `levelfield run`.")]
BACKEND_HELP = (
    "auto (default): a task whose environment is an image (Dockerfile FROM, docker_image) runs "
    'on oci, one declaring environment.userland = "host" on process. Or process, or oci.'
)
IMAGE_HELP = (
    "oci: prebuilt = task.toml's pinned docker_image, pulled when absent; build = from "
    "environment/; auto = prebuilt when present or pullable, else build. Trials record which."
)


EXECUTOR_HELP = (
    "local (this machine) or ray (a Ray cluster; each trial's floor is its resource request; "
    "needs the ray extra). On ray, --concurrency above 1 caps trials in flight cluster-wide."
)
RAY_ADDRESS_HELP = "Ray cluster: auto, HOST:6379 or ray://HOST:10001 (default $RAY_ADDRESS)."
INSTALL_MODE_HELP = (
    "CLI agent: sandbox (install in each trial under its limits, in its own agent_setup phase) "
    "or mounted (prepare once on the host, mount read-only into every sandbox)."
)
DISCLOSE_HELP = (
    "Tell the agent its floor and ceiling (LEVELFIELD_MEMORY_CEILING_BYTES... and a sentence in "
    "the instruction): off, on, or both (a factor of the design, compared paired by task)."
)


@app.command()
def run(
    dataset: Dataset,
    out: Annotated[Path, typer.Option(help="Run directory; the same command resumes it.")],
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
        str | None, typer.Option(help="Floor on every resource: 1x, 4g, 2cpu.")
    ] = None,
    ceiling: Annotated[
        str | None, typer.Option(help="Ceiling on every resource; none = uncapped.")
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Trials per task, agent and policy.")] = 1,
    concurrency: Annotated[int, typer.Option(min=1, help="Trials in flight at once.")] = 1,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "auto",
    image: Annotated[str, typer.Option(help=IMAGE_HELP)] = "auto",
    uv_shim: Annotated[bool, typer.Option(help=UV_SHIM_HELP)] = False,
    seed: Annotated[int, typer.Option(help="Seed of the interleaved trial order.")] = 0,
    window: Annotated[
        str, typer.Option(help="Label of this invocation's time window.")
    ] = "default",
    task: Annotated[list[str] | None, typer.Option(help="Only this task (repeatable).")] = None,
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
            help="Environment variable with the API key (default per agent: ANTHROPIC_API_KEY or "
            "OPENAI_API_KEY). Keys reach only the agent; masked in everything the run writes."
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
    disclose_limits: Annotated[str, typer.Option(help=DISCLOSE_HELP)] = "off",
    config: Annotated[Path | None, typer.Option(help="run.toml with the same keys.")] = None,
    executor: Annotated[str | None, typer.Option(help=EXECUTOR_HELP)] = None,
    ray_address: Annotated[str | None, typer.Option(help=RAY_ADDRESS_HELP)] = None,
    prices: Prices = None,
) -> None:
    """Run every task under each policy. Safe to interrupt: run the same command to resume."""
    _choice(agent_install_mode, ("sandbox", "mounted"), "--agent-install-mode")
    _choice(disclose_limits, ("off", "on", "both"), "--disclose-limits")
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
        agent_env=_key_values(agent_env or []),
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
    _execute(cfg)


def _choice(value: str, allowed: tuple[str, ...], hint: str) -> None:
    if value not in allowed:
        raise typer.BadParameter(f"{value!r}: choose {', '.join(allowed)}", param_hint=hint)


def _key_values(pairs: list[str]) -> dict[str, str]:
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise typer.BadParameter(f"expected KEY=VALUE, got {bad[0]!r}", param_hint="--agent-env")
    return dict(p.split("=", 1) for p in pairs)


@app.command()
def sweep(
    dataset: Dataset,
    out: Annotated[Path, typer.Option(help="Run directory; rerun to resume or add a window.")],
    agents: Annotated[
        str, typer.Option(help="Comma-separated agents, e.g. oracle,replay:lean.")
    ] = "oracle",
    policies: Annotated[
        str,
        typer.Option(
            help="Comma-separated policies; a bare multiplier is floor 1x, ceiling that multiple "
            "(3x = headroom)."
        ),
    ] = "strict,3x,uncapped",
    repeats: Annotated[int, typer.Option(min=1, help="Trials per task and configuration.")] = 3,
    concurrency: Annotated[int, typer.Option(min=1, help="Trials in flight at once.")] = 1,
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
    seed: Annotated[int, typer.Option(help="Seed of the interleaved order.")] = 0,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "auto",
    image: Annotated[str, typer.Option(help=IMAGE_HELP)] = "auto",
    uv_shim: Annotated[bool, typer.Option(help=UV_SHIM_HELP)] = False,
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
) -> None:
    """Every agent under every policy, interleaved in a seeded order; then the report. With
    --target-ci, adaptively: a pilot, then repeats where the CI needs them, until it is narrow."""
    _choice(disclose_limits, ("off", "on", "both"), "--disclose-limits")
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
        agent_options=AgentOptions(model=model, base_url=base_url),
        disclose_limits=disclose_limits,  # type: ignore[arg-type]
    )
    if target_ci:
        from levelfield._cli_adaptive import execute_adaptive

        execute_adaptive(cfg, target_ci, target, max_trials, pilot_repeats, err)
    else:
        _execute(cfg)
    if report or html:
        _report_sweep(out, html, show=report, seed=seed)


def _report_sweep(out: Path, html: Path | None, *, show: bool, seed: int) -> None:
    """The sweep's answer right after it: the summary on the terminal and/or the HTML page."""
    from levelfield._cli_analysis import _bad_input, _load
    from levelfield.analysis.summary import summarize
    from levelfield.report import render_html, show_summary

    data = _load(out)
    with _bad_input():
        summary = summarize(data.trials, info=data.info, seed=seed)
    if show:
        show_summary(summary, console)
        from levelfield._cli_analysis import show_adaptive_sections

        show_adaptive_sections(data, console)
    if html is not None:
        html.write_text(render_html(summary), encoding="utf-8")
        err.print(f"wrote {html}")


def _execute(cfg: RunConfig) -> None:
    from levelfield.executor import run as run_trials
    from levelfield.report.progress import TrialProgress
    from levelfield.store import reading

    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with TrialProgress(err, concurrency=cfg.concurrency) as progress:
            result = run_trials(cfg, on_plan=progress.plan, on_trial=progress.advance)
    except KeyboardInterrupt:
        err.print(
            f"[yellow]interrupted[/]: finished trials are stored in {cfg.out}; "
            "run the same command to resume"
        )
        raise typer.Exit(130) from None
    for problem in result.task_problems:
        err.print(f"[yellow]skipped task[/] {problem.message}")
    with reading(result.run_dir) as store:
        err.print(
            f"{result.executed} trials run, {store.count()} stored in {result.run_dir}; "
            f"see `levelfield results {result.run_dir}`"
        )


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


@app.command()
def results(
    run_dir: RunDir,
    json_out: Annotated[
        bool, typer.Option("--json", help="Every trial as JSON, evidence and telemetry included.")
    ] = False,
) -> None:
    """One row per stored trial: outcome, reason, peak memory, throttling, durations."""
    from levelfield.report.results import results_json, results_table
    from levelfield.store import reading

    with reading(run_dir) as store:
        records = list(store.records())
    if json_out:
        typer.echo(results_json(records))
    else:
        console.print(results_table(records))


@tasks_app.command("check")
def tasks_check(
    dataset: Dataset,
    with_nop: Annotated[
        bool, typer.Option(help="Also run the nop agent: a task it passes is broken.")
    ] = False,
    backend: Annotated[str, typer.Option(help="Backend for --with-nop.")] = "auto",
) -> None:
    """Validate every task; list problems and warnings, and the backend each task will get
    under --backend auto, and why; exit 1 if any task has a problem."""
    from levelfield.checks import check_dataset
    from levelfield.report.checks import show_task_checks

    report = check_dataset(dataset, with_nop=with_nop, backend=backend)
    show_task_checks(console, report)
    raise typer.Exit(1 if report.has_problems else 0)


@app.command()
def doctor() -> None:
    """What this host can enforce: cgroups and controllers, bubblewrap, loop disks, engines."""
    from levelfield.doctor import run_checks
    from levelfield.report.checks import show_doctor

    checks = run_checks()
    show_doctor(console, checks)
    raise typer.Exit(0 if all(c.ok for c in checks if c.needed_by == "process") else 1)


@app.command()
def reap(
    run_dir: RunDir,
    backend: Annotated[str | None, typer.Option(help="Default: the run's own.")] = None,
) -> None:
    """Remove processes, cgroups and disks a killed run left (a resumed run does this itself)."""
    from levelfield.sandbox import BackendOptions, get_backend
    from levelfield.store import reading

    with reading(run_dir) as store:
        run_id = store.meta()["run_id"]
        backend = backend or store.meta().get("backend") or "process"
    count = get_backend(backend, BackendOptions(run_id, run_dir.resolve())).reap(run_id)
    console.print(f"reaped {count} leftovers of run {run_id}")


@import_app.command("harbor")
def import_harbor(
    job_dir: Annotated[
        Path, typer.Argument(help="A Harbor job directory (result.json per trial).")
    ],
    out: Annotated[Path, typer.Option(help="Run directory to create or add to.")],
) -> None:
    """Import a Harbor job's trials as a run, mapping Harbor's exception types to reasons."""
    from levelfield.harbor_import import import_harbor_job

    result = import_harbor_job(job_dir, out)
    for problem in result.skipped:
        err.print(f"[yellow]skipped[/] {problem}")
    console.print(
        f"imported {result.imported} trials ({result.already_stored} already there) "
        f"into {result.run_dir}; see `levelfield report {result.run_dir}`"
    )


@images_app.command("offline-bases")
def offline_bases(
    cache_dir: Annotated[
        Path, typer.Option(help="Where the slow parts are kept between runs.")
    ] = Path("/var/cache/levelfield"),
    mirror: Annotated[str | None, typer.Option(help="Debian mirror (default: the host's).")] = None,
    with_uv: Annotated[bool, typer.Option(help="Also prepare the uv shim (--uv-shim).")] = True,
) -> None:
    """Build stand-in base images (python:3.13-slim-bookworm, ubuntu:24.04, ...) from Debian,
    for machines that reach no image registry. First run ~5-10 min; then cached."""
    from levelfield.sandbox.oci import build_offline_bases

    for stand_in in build_offline_bases(
        cache_dir=cache_dir, mirror=mirror, with_uv=with_uv, log=err.print
    ):
        how = "cached" if stand_in.cached else "built"
        console.print(f"{stand_in.tag}: {stand_in.description} ({how})")


def _register_optional_commands() -> None:
    from levelfield._cli_campaign import register as register_campaign

    register_campaign(app)
    from levelfield._cli_testing import register as register_testing

    register_testing(app)
    try:
        from levelfield._cli_analysis import register
    except ImportError:
        return
    register(app)


_register_optional_commands()


def main() -> None:
    """Entry point: a LevelfieldError is a message and an exit code, not a traceback."""
    try:
        app()
    except InputError as exc:
        err.print(f"[red]error:[/] {exc}")
        sys.exit(2)
    except LevelfieldError as exc:
        err.print(f"[red]error:[/] {exc}")
        sys.exit(1)
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted[/]: finished trials are stored; run the same command to resume"
        )
        sys.exit(130)
