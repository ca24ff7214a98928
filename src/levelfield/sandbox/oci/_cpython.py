"""Where the `python:3.13-slim-bookworm` stand-in's CPython comes from: reused or compiled once.

The official image carries CPython 3.13 in /usr/local, built for Debian bookworm. With no
registry, levelfield makes the same tree one of two ways, and caches it as a tarball of
`usr/local/...`:
  - **reused**: a CPython 3.13 already built on this host (pyenv's, under `$(pyenv root)`), when
    the host itself is bookworm, so that it links against the very libraries the stand-in
    installs. It is copied without its test suite and static library, its prefix rewritten to
    /usr/local and its interpreter's library path made relative (`$ORIGIN/../lib`, with
    patchelf), so that it runs both in /usr/local and where the uv shim binds it. Seconds;
  - **compiled** from the upstream tarball that Debian trixie's `python3.13` source package
    carries, in a minbase container: about 3 minutes on 2 quiet cores, much more on a busy host.

The reuse is what a fresh machine of the CI's kind does; `LEVELFIELD_STAND_IN_CPYTHON=compile`
forces the compile. Either way the tarball has a sidecar `.origin` file whose words the stand-in's
label (and so every trial's evidence) carries.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from levelfield.errors import SandboxStartError

SUITE = "bookworm"
PYTHON_SOURCE_SUITE = "trixie"  # its python3.13 source package carries the upstream tarball
FORCE_ENV = "LEVELFIELD_STAND_IN_CPYTHON"
PYTHON_BUILD_PACKAGES = (
    "gcc make pkg-config libc6-dev libbz2-dev libffi-dev libgdbm-dev libgdbm-compat-dev "
    "liblzma-dev libncursesw5-dev libreadline-dev libsqlite3-dev libssl-dev uuid-dev zlib1g-dev "
    "xz-utils"
)
# What the official image's python can import; a host build without one of them is not reused.
REQUIRED_MODULES = "ssl sqlite3 ctypes zlib lzma bz2 readline curses uuid hashlib decimal"
# No PGO/LTO: they triple the build time for a stand-in whose speed no test measures.
_CPYTHON_BUILD = f"""set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends {PYTHON_BUILD_PACKAGES} >/dev/null
mkdir -p /build && cd /build
tar -xJf /src/python.tar.xz --strip-components=1
./configure --prefix=/usr/local --enable-loadable-sqlite-extensions --with-ensurepip=install \\
    --enable-option-checking=fatal >/build/configure.log
make -j"$(nproc)" >/build/make.log 2>&1 || {{ tail -50 /build/make.log; exit 1; }}
make install DESTDIR=/out/root >/build/install.log 2>&1 \
    || {{ tail -50 /build/install.log; exit 1; }}
cd /out/root/usr/local
rm -rf lib/python3.*/test lib/python3.*/idlelib/idle_test lib/python3.*/tkinter/test \\
    lib/python3.*/config-*/libpython3.*.a
find . -depth -name __pycache__ -path '*/test*' -exec rm -rf {{}} +
strip --strip-unneeded bin/python3.* lib/python3.*/lib-dynload/*.so 2>/dev/null || true
for n in idle3 pip3 pydoc3 python3 python3-config; do ln -sf "$n" "bin/${{n%3}}"; done
tar -C /out/root -czf /out/cpython.tar.gz usr
"""
# Left out of a reused tree, as the compiled one leaves them out: tests, and the static library.
_SKIPPED = re.compile(r"^lib/python3\.\d+/(test|idlelib/idle_test|tkinter/test)(/|$)")
_SKIPPED_NAME = re.compile(r"^libpython3\.\d+t?\.a$")
# Text files that name the build's prefix: scripts' shebangs, sysconfig, pkg-config, the Makefile.
_PREFIX_FILES = (
    "bin/*",
    "lib/python3.*/_sysconfigdata_*.py",
    "lib/pkgconfig/*.pc",
    "lib/python3.*/config-*/Makefile",
    "lib/python3.*/config-*/python-config.py",
)

Log = Callable[[str], None]


def cpython_tarball(
    client: Any, cache_dir: Path, minbase: str, mirror: str, log: Log, network: str | None = None
) -> Path:
    """The cached CPython 3.13 tarball (usr/local/...), made once if there is none."""
    built = sorted((cache_dir / "cpython").glob(f"cpython-3.13.*-{SUITE}-*.tar.gz"))
    if built:
        return built[-1]
    (cache_dir / "cpython").mkdir(parents=True, exist_ok=True)
    if os.environ.get(FORCE_ENV, "reuse") != "compile":
        host = reusable_host_build()
        if host is not None:
            return _pack_host_build(host, cache_dir, log)
    return _compile(client, cache_dir, minbase, mirror, log, network)


def cpython_version(tarball: Path) -> str:
    return tarball.name.split("-")[1]


def cpython_origin(tarball: Path) -> str:
    """How the tarball was made, in the words the stand-in's label carries."""
    with contextlib.suppress(OSError):
        return tarball.with_name(tarball.name + ".origin").read_text().strip()
    return f"source: Debian {PYTHON_SOURCE_SUITE}"


def reusable_host_build(
    pyenv_root: Path | None = None, os_release: Path = Path("/etc/os-release")
) -> Path | None:
    """A CPython 3.13 prefix on this host that the stand-in can carry, or None.

    Only on a bookworm host (the libraries it links against are the stand-in's), only a build
    that imports what the official image's python imports, and only with patchelf to make its
    library path relative."""
    if _host_suite(os_release) != SUITE or shutil.which("patchelf") is None:
        return None
    root = pyenv_root or _pyenv_root()
    candidates = sorted(
        (p for p in root.glob("versions/3.13.*") if re.fullmatch(r"3\.13\.\d+", p.name)),
        key=lambda p: int(p.name.rsplit(".", 1)[1]),
    )
    for prefix in reversed(candidates):
        python = prefix / "bin" / "python3.13"
        imports = "import " + ", ".join(REQUIRED_MODULES.split())
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [str(python), "-I", "-c", imports], capture_output=True, timeout=60
            )
            if done.returncode == 0:
                return prefix
    return None


def _host_suite(os_release: Path) -> str:
    with contextlib.suppress(OSError):
        for line in os_release.read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return ""


def _pyenv_root() -> Path:
    found = os.environ.get("PYENV_ROOT")
    if found:
        return Path(found)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=10)
        if done.returncode == 0 and done.stdout.strip():
            return Path(done.stdout.strip())
    return Path.home() / ".pyenv"


def _pack_host_build(prefix: Path, cache_dir: Path, log: Log) -> Path:
    version = prefix.name
    target = cache_dir / "cpython" / f"cpython-{version}-{SUITE}-{os.uname().machine}.tar.gz"
    log(f"reusing this host's CPython {version} ({prefix}) for the python stand-in")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        local = Path(tmp) / "usr" / "local"
        _copy_prefix(prefix, local)
        _rewrite_prefix(local, str(prefix), "/usr/local")
        _relative_library_path(local)
        _check_runs(local)
        partial = Path(tmp) / "cpython.tar.gz"
        pack = ["tar", "-C", tmp, "--use-compress-program=gzip -1", "-cf", str(partial), "usr"]
        run_checked(pack, "tar")
        partial.rename(target)
    target.with_name(target.name + ".origin").write_text(
        f"reused: this host's {prefix} build, prefix moved to /usr/local\n"
    )
    return target


def _copy_prefix(prefix: Path, dest: Path) -> None:
    """The prefix without the test suite, the static library or any package beyond pip."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        relative = Path(folder).relative_to(prefix)
        skipped = set()
        for name in names:
            path = (relative / name).as_posix()
            extra_package = relative.name == "site-packages" and not name.startswith("pip")
            if _SKIPPED.match(path) or _SKIPPED_NAME.match(name) or extra_package:
                skipped.add(name)
        return skipped

    shutil.copytree(prefix, dest, symlinks=True, ignore=ignore)


def _rewrite_prefix(local: Path, old: str, new: str) -> None:
    for pattern in _PREFIX_FILES:
        for path in local.glob(pattern):
            if path.is_symlink() or not path.is_file() or path.stat().st_size > 4 << 20:
                continue
            data = path.read_bytes()
            if b"\0" in data[:4096] or old.encode() not in data:
                continue  # a binary, or nothing to rewrite
            path.write_bytes(data.replace(old.encode(), new.encode()))


def _relative_library_path(local: Path) -> None:
    """`$ORIGIN/../lib` for the interpreter, so that libpython is found wherever it is bound."""
    for binary in local.glob("bin/python3.1[0-9]"):
        if binary.is_symlink():
            continue
        run_checked(["patchelf", "--set-rpath", "$ORIGIN/../lib", str(binary)], "patchelf")


def _check_runs(local: Path) -> None:
    """The moved tree must start from its new place, with nothing of the old prefix."""
    python = local / "bin" / "python3.13"
    imports = "import " + ", ".join(REQUIRED_MODULES.split()) + "; import sys; print(sys.prefix)"
    done = subprocess.run([str(python), "-I", "-c", imports], capture_output=True, text=True)
    if done.returncode != 0 or done.stdout.strip() != str(local):
        raise SandboxStartError(
            f"the reused CPython does not run from {local}: {(done.stdout + done.stderr)[-500:]}"
        )


def _compile(
    client: Any, cache_dir: Path, minbase: str, mirror: str, log: Log, network: str | None
) -> Path:
    source = _python_source(cache_dir, mirror, log)
    version = source.name.split("_")[1].removesuffix(".orig.tar.xz")
    target = cache_dir / "cpython" / f"cpython-{version}-{SUITE}-{os.uname().machine}.tar.gz"
    log(f"building CPython {version} in {minbase} (once per machine, ~3 min)")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        (Path(tmp) / "build.sh").write_text(_CPYTHON_BUILD)
        _run_container(
            client,
            minbase,
            ["bash", "/work/build.sh"],
            {str(source): "/src/python.tar.xz", tmp: "/work", f"{tmp}/out": "/out"},
            network,
        )
        (Path(tmp) / "out" / "cpython.tar.gz").rename(target)
    target.with_name(target.name + ".origin").write_text(f"source: Debian {PYTHON_SOURCE_SUITE}\n")
    return target


def _run_container(
    client: Any, image: str, argv: list[str], binds: dict[str, str], network: str | None
) -> None:
    for host in binds:
        if not Path(host).exists():
            Path(host).mkdir(parents=True)
    volumes = {host: {"bind": inside, "mode": "rw"} for host, inside in binds.items()}
    container = client.containers.run(
        image,
        argv,
        volumes=volumes,
        detach=True,
        labels={"levelfield.run": "offline-bases"},
        network_mode=network,
    )
    try:
        code = container.wait()["StatusCode"]
        if code != 0:
            tail = container.logs().decode(errors="replace")[-3000:]
            raise SandboxStartError(f"CPython build exited {code}: {tail}")
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)


def _python_source(cache_dir: Path, mirror: str, log: Log) -> Path:
    """Debian trixie's python3.13 .orig tarball (the upstream release), via `apt-get source`."""
    src = cache_dir / "src"
    found = sorted(src.glob("python3.13_*.orig.tar.xz"))
    if found:
        return found[-1]
    log(f"fetching python3.13 source from Debian {PYTHON_SOURCE_SUITE}")
    apt = cache_dir / "apt"
    (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    src.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        f"{mirror} {PYTHON_SOURCE_SUITE} main\n"
    )
    options = [
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::Cache={apt / 'cache'}",
        "-oAPT::Sandbox::User=root",
    ]
    run_checked(["apt-get", *options, "update"], "apt-get update (deb-src)")
    fetch = ["apt-get", *options, "source", "--download-only", "python3.13"]
    run_checked(fetch, "apt-get source", src)
    found = sorted(src.glob("python3.13_*.orig.tar.xz"))
    if not found:
        raise SandboxStartError(f"apt-get source python3.13 left no .orig tarball in {src}")
    return found[-1]


def run_checked(argv: list[str], what: str, cwd: Path | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise SandboxStartError(f"{what} failed ({done.returncode}): {tail}")
