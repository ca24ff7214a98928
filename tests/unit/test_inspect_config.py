"""levelfield's Inspect sandbox, its pure parts: what a SandboxConfig may say and how Inspect
hands it over, the task a sample runs as, the exec wrapper's stdin and stderr (run by a real
bash), and how an imported sample's error names its class."""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath

import pytest

from levelfield import errors
from levelfield.hosted.commands import ExecCall, shell_command, split_stderr
from levelfield.inspect import SandboxConfig
from levelfield.inspect.config import record_folder_name, sandbox_config, task_of_sample
from levelfield.policy import apply_policy

SPIKE = Path(__file__).parents[2] / "examples" / "harbor" / "memory-spike"


@pytest.mark.parametrize(
    ("config", "policy", "backend"),
    [
        (None, "strict", "auto"),
        (SandboxConfig(policy="3x", backend="oci"), "headroom", "oci"),
        ({"floor": "1x", "ceiling": "3x"}, "headroom", "auto"),  # as Inspect logged it
        ("policy=strict,backend=process", "strict", "process"),
        # Inspect makes a config text absolute against the task's folder first
        ("/tasks/here/policy=1x/2x,backend=oci", "1x/2x", "oci"),
        ("/tasks/here/3x", "headroom", "auto"),
        ("ceiling=none", "uncapped", "auto"),
    ],
)
def test_the_config_inspect_hands_over_gives_the_policy_and_backend(
    config: object, policy: str, backend: str
) -> None:
    options = sandbox_config(config)
    assert (options.resolved_policy().name, options.backend) == (policy, backend)


def test_a_config_file_is_read_and_bad_fields_are_refused_with_what_it_reads(
    tmp_path: Path,
) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "levelfield.yaml"
    path.write_text("policy: 3x\nbackend: process\nmemory_mb: 256\n")
    assert sandbox_config(str(path)).memory_mb == 256
    for bad, said in (
        ("celing=3x", "celing"),
        ("policy=3x,ceiling=2x", "not both"),
        ("policy=loose", "unknown policy 'loose'"),
        ("backend=kubernetes", "backend"),
        ("memory_mb=0", "memory_mb"),
        ("policy", None),  # a bare word that names no policy
    ):
        with pytest.raises(errors.RunConfigError) as caught:
            sandbox_config(bad)
        assert "levelfield sandbox" in str(caught.value)
        if said:
            assert said in str(caught.value) and "it reads: policy" in str(caught.value)


def test_a_harbor_task_brings_its_spec_and_the_config_may_take_its_place(tmp_path: Path) -> None:
    metadata = {"task_dir": str(SPIKE), "task_name": "memory-spike"}
    own = task_of_sample(SandboxConfig(), metadata, tmp_path, "memory-spike")
    assert own.spec.memory_bytes == 256 << 20 and own.spec.cpus == 1.0
    over = task_of_sample(SandboxConfig(memory_mb=512), metadata, tmp_path, "memory-spike")
    assert over.spec.memory_bytes == 512 << 20
    limits = apply_policy(SandboxConfig(policy="3x").resolved_policy(), own.spec)
    assert limits.memory_ceiling_bytes == 768 << 20


def test_a_plain_sample_needs_a_spec_and_runs_on_the_host_or_the_image(tmp_path: Path) -> None:
    with pytest.raises(errors.RunConfigError, match="memory_mb"):
        task_of_sample(SandboxConfig(), {}, tmp_path / "a", "plain")
    host = task_of_sample(SandboxConfig(memory_mb=64, cpus=0.5), {}, tmp_path / "b", "plain")
    assert host.userland == "host" and host.spec.cpus == 0.5 and host.environment_dir.is_dir()
    image = task_of_sample(SandboxConfig(memory_mb=64, image="python:3.13"), {}, tmp_path, "x")
    assert image.docker_image == "python:3.13" and image.userland == "image"
    assert record_folder_name("a/b c", 2, 3) == "a_b_c__e2__a3"


def test_the_wrapper_feeds_stdin_and_keeps_stderr_apart(tmp_path: Path) -> None:
    stdin = tmp_path / "in"
    stdin.write_text("hello\n")
    marker = "--levelfield-stderr-abc--"
    call = ExecCall("read x; printf 'out:%s' \"$x\"; echo oops >&2; exit 4",
                    stdin=PurePosixPath(stdin), stderr_marker=marker)  # fmt: skip
    pid_file = PurePosixPath(tmp_path / "exec.pid")
    done = subprocess.run(["bash", "-c", shell_command(call, pid_file=pid_file)],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert done.returncode == 4
    assert split_stderr(done.stdout, marker) == ("out:hello", "oops\n")
    assert not stdin.exists() and not Path(f"{pid_file}.err").exists()  # both removed
    assert split_stderr("no marker: killed", marker) == ("no marker: killed", "")


def test_an_imported_samples_error_is_mapped_by_its_class() -> None:
    pytest.importorskip("inspect_ai")
    from levelfield.inspect.importing import _error_of

    oom = _error_of("LevelfieldOOMKilled: memory ceiling 256 MiB hit, oom_kill=1 (exit 137)")
    assert isinstance(oom, errors.LevelfieldOOMKilled)
    assert isinstance(_error_of("SandboxStartError: no image"), errors.SandboxStartError)
    assert type(_error_of("RuntimeError('boom')")) is RuntimeError  # Inspect's own: a harness's
    assert type(_error_of("Path: not an error class")) is RuntimeError
    assert _error_of(None) is None
