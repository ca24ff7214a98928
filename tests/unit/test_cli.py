import subprocess
import sys

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
