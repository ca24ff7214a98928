import subprocess
import sys
from typing import Any

import pytest
import typer
import typer.core
from typer.testing import CliRunner

import levelfield
from levelfield.cli.app import app

from ..conftest import MakeTask

runner = CliRunner()


def test_public_names_are_pinned() -> None:
    assert sorted(levelfield.__all__) == sorted(
        [
            "PRESETS",
            "LevelfieldError",
            "Limits",
            "Outcome",
            "Policy",
            "Reason",
            "RunConfig",
            "Task",
            "Trial",
            "TrialRecord",
            "apply_policy",
            "classify",
            "load_dataset",
            "load_task",
            "plan_trials",
            "resolve_policy",
            "run",
            "run_trial",
        ]
    )
    assert len(levelfield.__all__) <= 20


def test_help_explains_the_verbs() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for verb in ("run", "results", "tasks", "doctor", "reap"):
        assert verb in result.output
    run_help = runner.invoke(app, ["run", "--help"]).output
    assert "resume" in run_help and "headroom" in run_help
    for option in ("--agent-version", "--agent-env", "CLI agent: sandbox", "--disclose-limits"):
        assert option in run_help  # rich may shorten the longer option names


def _option(command: str, name: str) -> Any:
    """The parameter behind `levelfield COMMAND NAME`, as typer builds it for the CLI."""
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    params = group.commands[command].params
    return next((p for p in params if name in p.opts), None)


# A campaign is a sweep on a schedule: it takes the sweep's options, and run's --task.
CAMPAIGN_SHARES = {
    "dataset": ("run", "sweep"),
    "--out": ("run", "sweep"),
    "--agents": ("sweep",),
    "--policies": ("sweep",),
    "--repeats": ("run", "sweep"),
    "--concurrency": ("run", "sweep"),
    "--seed": ("run", "sweep"),
    "--backend": ("run", "sweep"),
    "--image": ("run", "sweep"),
    "--uv-shim": ("run", "sweep"),
    "--task": ("run",),
}


@pytest.mark.parametrize("name", sorted(CAMPAIGN_SHARES))
def test_campaign_spells_and_explains_an_option_as_run_and_sweep_do(name: str) -> None:
    mine = _option("campaign", name)
    assert mine is not None, f"campaign has no {name}"
    for other in CAMPAIGN_SHARES[name]:
        theirs = _option(other, name)
        assert theirs is not None, f"{other} has no {name}"
        assert (mine.opts, mine.secondary_opts) == (theirs.opts, theirs.secondary_opts), other
        assert getattr(mine, "help", None) == getattr(theirs, "help", None), other
        assert mine.multiple == theirs.multiple and mine.required == theirs.required, other
    # the sweep's default where the sweep has the option (--repeats 3), else run's
    assert mine.default == _option(CAMPAIGN_SHARES[name][-1], name).default


def test_every_running_command_picks_its_backend_per_task_by_default() -> None:
    for command in ("run", "sweep", "campaign"):
        assert _option(command, "--backend").default == "auto", command
    shown = runner.invoke(app, ["campaign", "--help"], env={"COLUMNS": "200"}).output
    assert "[default: auto]" in shown.split("--backend", 1)[1].split("--image", 1)[0]


def _levelfield(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "levelfield", *args], capture_output=True, text=True, timeout=60
    )


def test_bad_input_exits_2_with_a_message_not_a_traceback(make_task: MakeTask, tmp_path) -> None:  # type: ignore[no-untyped-def]
    root = make_task()
    done = _levelfield("run", str(root.parent), "--out", str(tmp_path / "r"), "--policy", "huge")
    assert done.returncode == 2 and "unknown policy 'huge'" in done.stderr
    assert "Traceback" not in done.stderr
    done = _levelfield(
        "run", str(root.parent), "--out", str(tmp_path / "r"), "--agent-install-mode", "docker"
    )
    assert done.returncode == 2 and "choose sandbox, mounted" in done.stderr
    done = _levelfield("results", str(tmp_path / "nothing"))
    assert done.returncode == 1 and "no run here" in done.stderr


def test_tasks_check_lists_problems_and_exits_1(make_task: MakeTask) -> None:
    make_task("fine")
    bad = make_task("bad")
    (bad / "task.toml").write_text("[agent]\ntimeout_sec = 'soon'\n")
    done = _levelfield("tasks", "check", str(bad.parent))
    assert done.returncode == 1
    assert (
        "bad" in done.stdout
        and "agent.timeout_sec" in done.stdout
        and "1 with problems" in done.stdout
    )


CRASH = """
import os, sys
from levelfield.cli.app import app, main

@app.command("crash-probe")
def crash_probe() -> None:
    options = {"api_key": os.environ["LF_PROBE_API_KEY"]}  # a local that holds a key
    raise RuntimeError("a bug")

sys.argv = ["levelfield", "crash-probe"]
main()
"""


def test_a_crash_shows_its_traceback_but_never_its_locals() -> None:
    """Typer prints a bug's traceback with rich; before 0.16 it showed every frame's locals by
    default, and a local may hold a key."""
    key = "sk-levelfield-crash-probe-5f3a9c"
    env = {"LF_PROBE_API_KEY": key, "PATH": "/usr/bin:/bin", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-c", CRASH], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0 and "RuntimeError" in done.stderr and "a bug" in done.stderr
    assert key not in done.stderr + done.stdout
    assert app.pretty_exceptions_show_locals is False
