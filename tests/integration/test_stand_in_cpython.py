"""The python stand-in's CPython, reused from this host's build: it must run from wherever it is
unpacked (/usr/local in the image, the uv shim's bind elsewhere) and carry nothing of its old
prefix, or every TB2 task built on it would run a Python that is not the image's."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

from levelfield.sandbox.oci import _cpython

from ..conftest import require


@pytest.fixture(scope="module")
def host_build() -> Path:
    found = _cpython.reusable_host_build()
    missing = [] if found is not None else ["a bookworm host with pyenv's CPython 3.13 + patchelf"]
    require(missing, "reusing the host's CPython")
    assert found is not None
    return found


def test_the_reused_build_runs_from_where_it_is_unpacked_with_its_prefix_moved(
    host_build: Path, tmp_path: Path
) -> None:
    (tmp_path / "cache" / "cpython").mkdir(parents=True)
    tarball = _cpython._pack_host_build(host_build, tmp_path / "cache", print)
    assert _cpython.cpython_version(tarball) == host_build.name
    assert str(host_build) in _cpython.cpython_origin(tarball)

    with tarfile.open(tarball) as tar:
        names = tar.getnames()
        tar.extractall(tmp_path / "unpacked", filter="tar")
    assert not [n for n in names if "/python3.13/test/" in n or n.endswith(".a")]
    site = [n for n in names if "/site-packages/" in n]
    assert site and all("/site-packages/pip" in n for n in site), "only pip, as the image has"

    # Elsewhere than /usr/local, as the uv shim binds it: libpython is found by $ORIGIN.
    elsewhere = tmp_path / "opt" / "python"
    elsewhere.parent.mkdir()
    (tmp_path / "unpacked" / "usr" / "local").rename(elsewhere)
    probe = (
        "import sys, ssl, sqlite3, ctypes, lzma, sysconfig; "
        "print(sys.prefix); print(sysconfig.get_config_var('prefix'))"
    )
    done = subprocess.run(
        [str(elsewhere / "bin" / "python3.13"), "-I", "-c", probe],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": ""},
    )
    assert done.returncode == 0, done.stderr
    prefix, configured = done.stdout.split()
    assert prefix == str(elsewhere)
    assert configured == "/usr/local"  # what a C extension built inside the image is told

    assert (elsewhere / "bin" / "pip3").read_text().splitlines()[0] == (
        "#!/usr/local/bin/python3.13"
    )
    for text in (elsewhere / "lib" / "python3.13").glob("_sysconfigdata_*.py"):
        assert str(host_build) not in text.read_text()


def test_a_host_of_another_release_or_without_patchelf_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trixie = tmp_path / "os-release"
    trixie.write_text('PRETTY_NAME="Debian GNU/Linux 13"\nVERSION_CODENAME=trixie\n')
    assert _cpython.reusable_host_build(os_release=trixie) is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no patchelf on this PATH
    assert _cpython.reusable_host_build() is None
