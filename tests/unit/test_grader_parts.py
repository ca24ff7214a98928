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
    found = _grader._installed(
        tmp_path, PurePosixPath("/usr/local/lib/python3.13/site-packages")
    )
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


def test_addresses_read_as_the_kernel_writes_them() -> None:
    assert _processes._address("0100007F:1F90") == "127.0.0.1:8080"
    assert _processes._address("00000000:1F40") == "0.0.0.0:8000"
    assert _processes._address("00000000000000000000000000000000:0050") == "[::]:80"
