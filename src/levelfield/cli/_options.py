"""The options several commands share: their types, their help, and the parsing of their values.

Help texts live here once, so `run`, `sweep` and `campaign` describe a backend or a policy in the
same words. Parsing errors are `typer.BadParameter`: bad input, exit 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

Dataset = Annotated[Path, typer.Argument(help="Directory of Harbor-format tasks (or one task).")]
RunDir = Annotated[Path, typer.Argument(help="A run directory written by `levelfield run`.")]
Seed = Annotated[int, typer.Option(help="Seed of the bootstrap and permutation resamples.")]

UV_SHIM_HELP = (
    "oci: place uv/uvx (from the PyPI wheel) in the container before the verifier, "
    "for machines where test.sh cannot download it; see `levelfield images`."
)
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

# The options `run`, `sweep` and `campaign` share: one spelling, one help text, each command its
# own default where its use differs (a run is one trial per cell, a sweep three).
Out = Annotated[Path, typer.Option(help="Run directory; the same command resumes it.")]
Agents = Annotated[str, typer.Option(help="Comma-separated agents, e.g. oracle,replay:lean.")]
Policies = Annotated[
    str,
    typer.Option(
        help="Comma-separated policies; a bare multiplier is floor 1x, ceiling that multiple "
        "(3x = headroom)."
    ),
]
Repeats = Annotated[int, typer.Option(min=1, help="Trials per task and configuration.")]
Concurrency = Annotated[int, typer.Option(min=1, help="Trials in flight at once.")]
OrderSeed = Annotated[int, typer.Option(help="Seed of the interleaved trial order.")]
Backend = Annotated[str, typer.Option(help=BACKEND_HELP)]
Image = Annotated[str, typer.Option(help=IMAGE_HELP)]
UvShim = Annotated[bool, typer.Option(help=UV_SHIM_HELP)]
Tasks = Annotated[list[str] | None, typer.Option("--task", help="Only this task (repeatable).")]

TargetCi = Annotated[
    str | None,
    typer.Option(
        help="Adaptive sweep: stop when the target's 95 % CI half-width is at most this "
        "(2pp = ±2 points). A pilot of --pilot-repeats per task, then rounds that give more "
        "repeats to the tasks whose variance the CI needs cut."
    ),
]
Target = Annotated[
    str,
    typer.Option(
        help="What --target-ci is about: score (every configuration's) or diff:A-B, the paired "
        "difference A − B (policies, agents, or AGENT/POLICY)."
    ),
]
MaxTrials = Annotated[
    int | None,
    typer.Option(min=1, help="Adaptive budget, pilot included (default: 10x the pilot)."),
]
PilotRepeats = Annotated[int, typer.Option(min=2, help="Adaptive: repeats of the pilot.")]
Prices = Annotated[
    Path | None,
    typer.Option(
        help="Price table (TOML: [models.NAME] input/output = $ per million tokens) that puts a "
        "cost on each trial; default: the one shipped with levelfield."
    ),
]

MaxTokens = Annotated[
    int | None,
    typer.Option(
        min=1,
        help="Model budget: tokens (in + out) one trial's model calls may spend. Once the ended "
        "calls reach it, the proxy refuses further calls in the provider's own error shape and "
        "the trial is failed/budget_exhausted unless its tests pass; the call that crosses it "
        "is answered whole, so a trial can end above it by what that call cost.",
    ),
]
MaxCost = Annotated[
    float | None,
    typer.Option(
        min=0.000001,
        help="Model budget in US dollars (tokens × --prices), kept as --max-tokens-per-trial "
        "is. Each call is priced at the model it names; a model without a price is refused.",
    ),
]

_POINTS = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(pp|pts?|points?|%)?\s*$")


def parse_points(text: str) -> float:
    """Points to a proportion: "2pp", "2 pts", "2%" → 0.02. A bare number below 1 is already a
    proportion ("0.02"), from 1 up it is points ("2"). Raises typer.BadParameter (exit 2)."""
    match = _POINTS.match(text)
    if not match:
        raise typer.BadParameter(f"{text!r}: expected points such as 2pp, 2% or 0.02")
    value, unit = float(match.group(1)), match.group(2)
    return value / 100 if unit or value >= 1 else value


def choice(value: str, allowed: tuple[str, ...], hint: str) -> None:
    if value not in allowed:
        raise typer.BadParameter(f"{value!r}: choose {', '.join(allowed)}", param_hint=hint)


def key_values(pairs: list[str]) -> dict[str, str]:
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise typer.BadParameter(f"expected KEY=VALUE, got {bad[0]!r}", param_hint="--agent-env")
    return dict(p.split("=", 1) for p in pairs)
