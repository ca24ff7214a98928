"""The grader's pieces that need no sandbox: which files its start takes from the image, which
Python hooks a package owns, where the image's own file is, and how what was left running reads."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from levelfield.sandbox import _processes
from levelfield.sandbox.oci import _grader


@pytest.mark.parametrize(
    ("path", "reset"),
    [
        ("/etc/pip.conf", True),
        ("/etc/apt/apt.conf.d/00forge", True),
        ("/etc/apt/sources.list.d/agent.list", True),
        ("/etc/ld.so.preload", True),
        ("/etc/uv/uv.toml", True),
        ("/etc/python3.11/sitecustomize.py", True),
        ("/etc/nginx/nginx.conf", False),  # the work a task may ask for
        ("/etc/ld.so.cache", False),  # ldconfig after the agent's own libraries
        ("/etc/passwd", False),
    ],
)
def test_which_start_up_files_come_from_the_image(path: str, reset: bool) -> None:
    assert bool(_grader.RESET.search(path)) is reset


@pytest.mark.parametrize(
    ("path", "hook"),
    [
        ("/usr/local/lib/python3.13/site-packages/zz-forge.pth", True),
        ("/usr/lib/python3/dist-packages/sitecustomize.py", True),
        ("/usr/lib/python3.11/sitecustomize.py", True),
        ("/usr/local/lib/python3.13/site-packages/usercustomize.cpython-313.pyc", True),
        ("/usr/local/lib/python3.13/site-packages/sitecustomize/__init__.py", True),
        ("/usr/local/lib/python3.13/site-packages/numpy/__init__.py", False),
        ("/app/sitecustomize.py", False),  # not on the system's path: the agent's work
    ],
)
def test_python_start_up_hooks(path: str, hook: bool) -> None:
    assert bool(_grader.PYTHON_HOOK.search(path)) is hook


def test_a_hook_a_package_lists_is_the_package_s(tmp_path: Path) -> None:
    site = tmp_path / "usr/local/lib/python3.13/site-packages"
    (site / "pkg-1.0.dist-info").mkdir(parents=True)
    (site / "pkg-1.0.dist-info" / "RECORD").write_text(
        "__editable__.pkg-1.0.pth,sha256=x,12\n__editable___pkg_finder.py,,\n../../../bin/pkg,,\n"
    )
    (site / "old.egg-info").mkdir()
    (site / "old.egg-info" / "installed-files.txt").write_text("../old.pth\n")
    found = _grader._installed(tmp_path, PurePosixPath("/usr/local/lib/python3.13/site-packages"))
    assert "__editable__.pkg-1.0.pth" in found and "old.pth" in found
    assert "zz-forge.pth" not in found


def test_the_image_s_file_is_the_topmost_layer_s_unless_a_layer_removed_it(tmp_path: Path) -> None:
    top, middle, bottom = (tmp_path / name for name in ("top", "middle", "bottom"))
    for layer in (top, middle, bottom):
        (layer / "etc").mkdir(parents=True)
    (bottom / "etc" / "pip.conf").write_text("bottom")
    (middle / "etc" / "pip.conf").write_text("middle")
    layers = [top, middle, bottom]
    assert _grader._in_image(layers, PurePosixPath("/etc/pip.conf")) == middle / "etc/pip.conf"
    assert _grader._in_image(layers, PurePosixPath("/etc/wgetrc")) is None
    if os.geteuid() != 0:
        pytest.skip("a whiteout is a character device: root makes it")
    os.mknod(top / "etc" / "pip.conf", 0o600 | 0o020000, os.makedev(0, 0))
    assert _grader._in_image(layers, PurePosixPath("/etc/pip.conf")) is None


@pytest.mark.parametrize(
    ("path", "image"),
    [
        ("/usr/local/lib/python3.13/argparse.py", True),
        ("/usr/local/lib/python3.13/pathlib/__init__.py", True),
        ("/usr/local/lib/python3.13/lib-dynload/_json.cpython-313-x86_64-linux-gnu.so", True),
        ("/usr/lib/python3.11/json/decoder.py", True),
        ("/usr/local/pip.conf", True),
        ("/usr/local/lib/python3.13/site-packages/pkg/__init__.py", False),  # installs are kept
        ("/usr/lib/python3/dist-packages/apt/__init__.py", False),
        ("/app/argparse.py", False),
    ],
)
def test_the_standard_library_and_pip_s_prefix_config_come_from_the_image(
    path: str, image: bool
) -> None:
    assert bool(_grader.STDLIB.search(path)) is image


def test_a_sitecustomize_is_no_package_s_whatever_its_record_says(tmp_path: Path) -> None:
    site = PurePosixPath("/usr/local/lib/python3.13/site-packages")
    folder = tmp_path / "usr/local/lib/python3.13/site-packages"
    (folder / "helper-1.0.dist-info").mkdir(parents=True)
    (folder / "helper-1.0.dist-info" / "RECORD").write_text("sitecustomize.py,,\nhelper.pth,,\n")
    assert not _grader._listed(tmp_path, site / "sitecustomize.py", site)
    assert _grader._listed(tmp_path, site / "helper.pth", site)


def test_a_library_the_agent_added_to_a_python_it_installed_is_its_own(tmp_path: Path) -> None:
    layer = tmp_path / "layer"
    (layer / "usr/local/lib/python3.13").mkdir(parents=True)
    (layer / "usr/local/lib/python3.13/os.py").write_text("")
    image = _grader._image_python([layer], PurePosixPath("/usr/local/lib/python3.13/evil.py"))
    apt = _grader._image_python([layer], PurePosixPath("/usr/lib/python3.11/os.py"))
    assert image and not apt


def test_the_root_is_one_mount_with_the_agents_top_level_config_covered(tmp_path: Path) -> None:
    """The container's root is bound once; a test runner's configuration the agent wrote at the
    top is covered (a file by /dev/null, a folder by a tmpfs), one the image shipped is not, a
    link there or at a folder the grader mounts on is refused, and a missing one is made."""
    merged = tmp_path / "merged"
    for name in ("usr", "app", "proc", "dev", "sys", "run", "logs"):
        (merged / name).mkdir(parents=True)
    (merged / "etc").symlink_to("app")
    (merged / "pytest.ini").write_text("[pytest]\n")
    (merged / "conftest.py").mkdir()
    (merged / "setup.cfg").write_text("[tool:pytest]\n")  # the image's
    (merged / "tox.ini").symlink_to("/app/agent.ini")
    changes = [("/pytest.ini", 1), ("/conftest.py", 1), ("/tox.ini", 1), ("/etc", 0)]
    fds: list[int] = []
    try:
        root, folders, refused = _grader._one_root(merged, [], changes, fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert root[:3] == ["--bind-fd", root[1], "/"] and len(fds) == 1
    assert root[3:] == ["--tmpfs", "/conftest.py", "--ro-bind", "/dev/null", "/pytest.ini"]
    assert refused == ["/etc", "/tox.ini"]
    assert (merged / "tests").is_dir() and "tests" in folders and "etc" in folders


def test_addresses_read_as_the_kernel_writes_them() -> None:
    assert _processes._address("0100007F:1F90") == "127.0.0.1:8080"
    assert _processes._address("00000000:1F40") == "0.0.0.0:8000"
    assert _processes._address("00000000000000000000000000000000:0050") == "[::]:80"


def test_the_agent_s_cpu_while_the_grader_runs_is_what_its_processes_took(tmp_path: Path) -> None:
    """Real processes: a busy loop counts its CPU, a sleeper nothing, and without the
    sandbox's PID namespace to tell the agent's processes by, nothing is counted."""
    import subprocess
    import sys
    import time

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen(["sleep", "30"])
    try:
        procs = tmp_path / "cgroup.procs"
        procs.write_text(f"{busy.pid}\n{idle.pid}\n")
        start = _on_cpu_s(busy.pid)
        with _processes.AgentCpu([procs], Path("/proc/self/ns/pid")) as taken:
            deadline = time.monotonic() + 60
            while _on_cpu_s(busy.pid) - start < 0.5 and time.monotonic() < deadline:
                time.sleep(0.05)  # however loaded the host: until the loop had half a second
        ran = _on_cpu_s(busy.pid) - start
        with _processes.AgentCpu([procs], tmp_path / "no-namespace") as other:
            time.sleep(0.3)
        procs.write_text(f"{idle.pid}\n")
        with _processes.AgentCpu([procs], Path("/proc/self/ns/pid")) as sleeping:
            time.sleep(0.5)
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()
    assert ran >= 0.5
    assert abs(taken.seconds - ran) <= 0.3  # the kernel's own runtime, in ns: schedstat
    assert other.seconds == 0
    assert sleeping.seconds == 0


def _on_cpu_s(pid: int) -> float:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
