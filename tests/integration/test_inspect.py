"""Inspect AI with levelfield's sandbox: the real `inspect eval` CLI (inspect-ai 0.3.285 and
inspect-harbor 1.0 from PyPI, in .venv-inspect) running Harbor tasks under strict and 3x on
process and oci, and what `levelfield import inspect` and `report` make of its logs; and the
sandbox's own exec and files, driven on Python 3.11 (.venv) without an eval.

The Harbor tasks are the example memory spike (as an image task, oci under auto, and on the
host's userland, process) and a TB2 task, solved by Inspect's scripted model calling the bash tool
with each task's solution (`_inspect_tasks.py`). The two evals run once for the module, at once.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from levelfield import errors
from levelfield.hosted.record import EnvironmentRecord, read_record_file
from levelfield.records import Outcome, Reason
from levelfield.sandbox.cgroups import PREFIX, detect
from levelfield.sandbox.disks import mounts_under
from levelfield.store import reading

from ..conftest import REPO, TB2_SAMPLE, require

INSPECT = REPO / ".venv-inspect" / "bin" / "inspect"
TASKS = Path(__file__).parent / "_inspect_tasks.py"
PODMAN_SOCKET = "unix:///run/podman/podman.sock"
SPIKE = REPO / "examples" / "harbor" / "memory-spike"
TB2_TASK = "regex-log"  # as in test_harbor.py: builds offline, its verifier runs uvx
SPIKES = {"spike-image": "oci", "spike-host": "process"}
UNDONE = "undone"  # the spike left undone: its tests fail, under every policy


def _spike_task(root: Path, name: str, *, userland: str | None, undone: bool = False) -> None:
    task = root / name
    shutil.copytree(SPIKE, task)
    if userland:
        toml = task / "task.toml"
        toml.write_text(
            toml.read_text().replace("[environment]", f'[environment]\nuserland = "{userland}"')
        )
    if undone:  # its own instruction, for the scripted model to answer with its own solution
        (task / "instruction.md").write_text("Leave the index unbuilt.\n")
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")


@pytest.fixture(scope="module")
def evals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One eval under strict (retrying errored samples once) and one under 3x, run at once on
    the same four Harbor tasks; their logs, read with Inspect's own reader."""
    require([] if INSPECT.is_file() else [str(INSPECT)], "Inspect (scripts/inspect_setup.sh)")
    if not (TB2_SAMPLE / TB2_TASK).is_dir():
        require([str(TB2_SAMPLE / TB2_TASK)], "the TB2 sample")
    from inspect_ai.log import read_eval_log

    from levelfield.sandbox import oci

    require(list(oci.engine_report(PODMAN_SOCKET).problems), "podman's API (scripts/oci_setup.sh)")
    root = tmp_path_factory.mktemp("inspect")
    dataset = root / "dataset"
    _spike_task(dataset, "spike-image", userland=None)
    _spike_task(dataset, "spike-host", userland="host")
    _spike_task(dataset, UNDONE, userland="host", undone=True)
    (dataset / TB2_TASK).symlink_to(TB2_SAMPLE / TB2_TASK)
    env = {**os.environ, "DOCKER_HOST": PODMAN_SOCKET, "LEVELFIELD_HARBOR_DIR": str(root / "cache")}
    runs = {
        "strict": ["--sandbox", "levelfield:policy=strict,uv_shim=true", "--retry-on-error=1"],
        "3x": ["--sandbox", "levelfield:floor=1x,ceiling=3x,uv_shim=true"],
    }
    procs = {
        name: subprocess.Popen(
            [
                str(INSPECT),
                "eval",
                f"{TASKS}@harbor_scripted",
                "-T",
                f"path={dataset}",
                "--log-dir",
                str(root / name),
                "--no-fail-on-error",
                "--display",
                "plain",
                *args,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=root,
        )
        for name, args in runs.items()
    }
    found: dict[str, Any] = {"root": root, "pids": [proc.pid for proc in procs.values()]}
    for name, proc in procs.items():
        output, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, output[-3000:]
        (log_path,) = (root / name).glob("*.eval")
        found[name] = (log_path, read_eval_log(str(log_path)))
    return found


def _samples(log: Any) -> dict[str, Any]:
    return {str(s.id): s for s in log.samples}


def _record(log_path: Path, name: str, attempt: int = 1) -> EnvironmentRecord:
    """The levelfield record of a sample's attempt, beside the log."""
    folder = log_path.parent / f"{log_path.stem}.levelfield" / f"{name}__e1__a{attempt}"
    record = read_record_file(folder / "record.json")
    assert record is not None, folder
    return record


@pytest.mark.inspect
@pytest.mark.oci
@pytest.mark.slow
def test_strict_the_spike_is_a_sample_error_naming_the_kill_left_out_of_the_score(
    evals: dict[str, Any],
) -> None:
    log_path, log = evals["strict"]
    samples = _samples(log)
    for name, backend in SPIKES.items():
        sample = samples[name]
        assert sample.error is not None and not sample.scores  # excluded from the score
        message = sample.error.message
        assert message.startswith("LevelfieldOOMKilled: memory ceiling 256 MiB hit, oom_kill="), (
            message
        )
        assert len(sample.error_retries) == 1  # --retry-on-error ran it again: both attempts
        assert sample.error_retries[0].message.startswith("LevelfieldOOMKilled: memory ceiling")
        noted = sample.metadata["levelfield"]
        assert noted["policy"] == "strict" and noted["backend"] == backend
        assert noted["ceiling_hit"]["exception"] == "LevelfieldOOMKilled"
        assert noted["ceiling_hit"]["evidence"].startswith("oom_kill=")
        for attempt in (1, 2):  # each attempt's record beside the log
            record = _record(log_path, name, attempt)
            assert record.backend == backend
            assert record.evidence.oom_kills >= 1 and record.ceiling_hits[0].raised
            assert record.limits["memory_ceiling_bytes"] == 256 << 20
    tb2 = samples[TB2_TASK]
    assert tb2.error is None and tb2.scores["harbor_scorer"].value == 1.0
    assert mounts_under(evals["root"]) == []  # every trial disk went with its sandbox
    runs = [b / PREFIX / f"inspect-{pid}" for b in detect().bases.values() for pid in evals["pids"]]
    assert not [run for run in runs if run.exists()]  # each Inspect process removed its run
    assert log.results is not None
    (score,) = log.results.scores
    assert (log.results.total_samples, score.scored_samples) == (4, 2)  # errors: not scored
    assert score.metrics["accuracy"].value == 0.5  # the kills are not the agent's failures
    assert _record(log_path, TB2_TASK).outcome is Outcome.PASSED  # the records say the same
    undone = _record(log_path, UNDONE)
    assert (undone.outcome, undone.reason, undone.reward) == (
        Outcome.FAILED, Reason.TESTS_FAILED, 0.0
    )


@pytest.mark.inspect
@pytest.mark.oci
@pytest.mark.slow
def test_3x_every_sample_passes_and_the_spike_needed_more_than_its_spec(
    evals: dict[str, Any],
) -> None:
    log_path, log = evals["3x"]
    for name, sample in _samples(log).items():
        assert sample.error is None, sample.error
        assert sample.scores["harbor_scorer"].value == (0.0 if name == UNDONE else 1.0), name
    for name in SPIKES:
        record = _record(log_path, name)
        assert record.policy == "headroom"
        assert record.evidence.memory_peak_bytes is not None
        assert record.evidence.memory_peak_bytes > 256 << 20 and record.evidence.oom_kills == 0


@pytest.mark.inspect
@pytest.mark.oci
@pytest.mark.slow
def test_levelfield_import_of_the_inspect_logs_gives_their_verdicts_and_reports(
    evals: dict[str, Any],
) -> None:
    out = evals["root"] / "run"
    cli = [sys.executable, "-m", "levelfield"]
    logs = [str(evals[name][0]) for name in ("strict", "3x")]
    done = subprocess.run([*cli, "import", "inspect", *logs, "--out", str(out)],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with reading(out) as store:
        records = {(r.task, r.policy): r for r in store.records()}
    for name in SPIKES:
        killed = records[(name, "strict")]
        assert (killed.outcome, killed.reason) == (Outcome.INFRA_ERROR, Reason.OOM_KILLED)
        assert killed.error and killed.error.startswith("LevelfieldOOMKilled: memory ceiling")
        assert killed.attempt == 2 and killed.evidence.oom_kills >= 1
        assert any(
            n.startswith("Inspect attempt 1 of 2: LevelfieldOOMKilled")
            for n in killed.evidence.notes
        )
        assert records[(name, "headroom")].outcome is Outcome.PASSED
    for policy in ("strict", "headroom"):
        assert records[(TB2_TASK, policy)].outcome is Outcome.PASSED
        undone = records[(UNDONE, policy)]
        assert (undone.outcome, undone.reason) == (Outcome.FAILED, Reason.TESTS_FAILED)
    again = subprocess.run([*cli, "import", "inspect", *logs, "--out", str(out)],
                           capture_output=True, text=True)  # fmt: skip
    assert "imported 0 trials (8 already there" in " ".join(again.stdout.split())
    report = subprocess.run([*cli, "report", str(out)], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "200"})  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "headroom − strict" in report.stdout


# -- the sandbox itself, on Python 3.11 and the process backend, without an eval --------------


@pytest.mark.sandbox
def test_the_sandbox_runs_execs_and_files_and_raises_a_failed_execs_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("inspect_ai")
    import anyio

    from levelfield.inspect import SandboxConfig
    from levelfield.inspect.sandbox import LevelfieldSandbox

    monkeypatch.setenv("LEVELFIELD_HARBOR_DIR", str(tmp_path / "cache"))
    config = SandboxConfig(policy="strict", backend="process", memory_mb=48)

    async def scenario() -> None:
        envs = await LevelfieldSandbox.sample_init("plain", config, {"__sample_id__": "s/1"})
        box = envs["default"]
        try:
            said = await box.exec(["bash", "-c", "read x; echo out:$x; echo err >&2; exit 3"],
                                  input="in\n")  # fmt: skip
            assert (said.returncode, said.stdout, said.stderr) == (3, "out:in\n", "err\n")
            await box.write_file("sub/data.bin", b"\x00\x01")  # relative: in the workdir
            assert await box.read_file("/app/sub/data.bin", text=False) == b"\x00\x01"
            assert (await box.exec(["pwd"], cwd="sub")).stdout.strip() == "/app/sub"
            with pytest.raises(FileNotFoundError):
                await box.read_file("/app/missing")
            with pytest.raises(IsADirectoryError):
                await box.read_file("/app/sub")
            with pytest.raises(TimeoutError):
                await box.exec(["sleep", "20"], timeout=1)
            plant = "for n in $(seq 1 40); do mkfifo /tmp/.levelfield-exec-$n.pid{,.err,.in}; done"
            await box.exec(["bash", "-c", plant])  # FIFOs where a guessable wrapper file would be
            assert (await box.exec(["echo", "graded"], input="x", timeout=20)).stdout == "graded\n"
            with pytest.raises(errors.LevelfieldOOMKilled, match="memory ceiling 48 MiB hit"):
                await box.exec(["python3", "-c", "b = b'x' * (100 << 20)"])
        finally:
            await LevelfieldSandbox.sample_cleanup("plain", config, envs, False)

    async def survived(reward: str) -> None:
        """A kill the exec survived: raised as a Harbor grader reads a reward below 1."""
        meta = {"__sample_id__": f"survived-{reward}"}
        envs = await LevelfieldSandbox.sample_init("plain", config, meta)
        box = envs["default"]
        try:
            said = await box.exec(["bash", "-c", "python3 -c 'b = b\"x\" * (100 << 20)'; true"])
            assert said.returncode == 0 and "Killed" in said.stderr
            await box.exec(["bash", "-c", f"echo {reward} > /logs/verifier/reward.txt"])
            if reward == "1":
                assert (await box.read_file("/logs/verifier/reward.txt")).strip() == "1"
            else:
                with pytest.raises(errors.LevelfieldOOMKilled, match="memory ceiling 48 MiB"):
                    await box.read_file("/logs/verifier/reward.txt")
        finally:
            await LevelfieldSandbox.sample_cleanup("plain", config, envs, False)

    anyio.run(scenario)
    anyio.run(survived, "0")
    anyio.run(survived, "1")
    for reward, raised in (("0", True), ("1", False)):
        (path,) = (tmp_path / "cache" / "inspect").glob(f"plain/survived-{reward}__e1__a1/*.json")
        assert read_record_file(path).ceiling_hits[0].raised is raised  # type: ignore[union-attr]
    (record_path,) = (tmp_path / "cache" / "inspect").glob("plain/s_1__e1__a1/record.json")
    record = read_record_file(record_path)
    assert record is not None and record.execs == 6 and record.evidence.oom_kills >= 1
    assert record.ceiling_hits[0].raised
