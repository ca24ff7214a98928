"""Stand-in base images for hosts that reach no image registry, and the uv shim for test.sh.

Terminal-Bench 2.0 Dockerfiles start FROM `python:3.13-slim-bookworm` or `ubuntu:24.04`. Without a
registry, levelfield builds stand-ins from Debian's own archive, which stays reachable:
  - a bookworm minbase rootfs (debootstrap), imported; it stands in for `ubuntu:24.04`;
  - the same plus CPython 3.13 compiled from the upstream tarball that Debian trixie's
    `python3.13` source package carries, installed in /usr/local as the official image does; it
    stands in for `python:3.13-slim-bookworm`. Bookworm, not trixie: trixie's OpenSSL 3.5 fails
    Terminal-Bench 2.0's `openssl-selfsigned-cert` task.
Both carry the host's CA certificates so that apt, pip and uv inside reach the mirror and PyPI
through this host's egress, and a `levelfield.stand-in` label that the trial's evidence records.

Everything slow is cached under `cache_dir` (default /var/cache/levelfield): the rootfs tarball,
the CPython build (~2.5 min on 2 cores, done once per machine) and the uv binaries, so a second
run costs seconds even when the engine's image store was wiped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from levelfield.errors import HostUnsupported, SandboxStartError
from levelfield.sandbox.oci._cpython import SUITE, cpython_origin, cpython_tarball, cpython_version
from levelfield.sandbox.oci._cpython import run_checked as _run

DEFAULT_CACHE_DIR = Path(os.environ.get("LEVELFIELD_CACHE_DIR", "/var/cache/levelfield"))
RECIPE_VERSION = "1"  # bump when the recipes below change: cached images then rebuild
UV_VERSION = "0.9.5"  # the uv version TB2's tests/test.sh download with uv's installer script
MINBASE_IMAGE = "levelfield/stand-in-bookworm"
STAND_IN_FOR = {  # the FROM names of the sample, fully qualified as the engine stores them
    "python": ("docker.io/library/python", "3.13-slim-bookworm"),
    "ubuntu": ("docker.io/library/ubuntu", "24.04"),
    "debian": ("docker.io/library/debian", "bookworm-slim"),  # tests' tiny tasks use it
}
LABEL_KEY = "levelfield.stand-in-key"
SHIM_UV_DIR = "/opt/levelfield/uv"
SHIM_PYTHON_DIR = "/opt/levelfield/python"
# What the official python image installs at run time (docker-library/python, bookworm/slim).
PYTHON_RUNTIME_PACKAGES = (
    "ca-certificates netbase tzdata libbz2-1.0 libexpat1 libffi8 libgdbm6 libgdbm-compat4 "
    "liblzma5 libncursesw6 libreadline8 libsqlite3-0 libssl3 libtinfo6 libuuid1 zlib1g"
)


def uv_shim_install(uv_dir: str = SHIM_UV_DIR, python_dir: str = SHIM_PYTHON_DIR) -> str:
    """Run before test.sh: what uv's installer script would have left in $HOME, linked to the
    shim's uv, uvx and CPython (bound read-only at `uv_dir` and `python_dir`), so that `curl … |
    sh` (which cannot resolve here and pipes nothing into sh) is harmless and `source
    $HOME/.local/bin/env` works."""
    return f"""set -e
bin="$HOME/.local/bin"
mkdir -p "$bin" "$HOME/.config/uv"
ln -sf {uv_dir}/uv "$bin/uv"
ln -sf {uv_dir}/uvx "$bin/uvx"
command -v python3.13 >/dev/null 2>&1 || ln -sf {python_dir}/bin/python3.13 "$bin/python3.13"
cat >"$bin/env" <<'EOF'
#!/bin/sh
case ":${{PATH}}:" in
    *:"$HOME/.local/bin":*) ;;
    *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
EOF
[ -e "$HOME/.config/uv/uv.toml" ] || echo 'native-tls = true' >"$HOME/.config/uv/uv.toml"
"""


UV_SHIM_INSTALL = uv_shim_install()

Log = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class StandIn:
    """One base image ready in the engine."""

    tag: str
    description: str
    cached: bool


def detect_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The host's Debian mirror (deb822 `URIs:` or one-line `deb URL bookworm`); the stand-ins
    are built from the same archive the host itself installs from."""
    candidates = [*sorted(sources_dir.glob("sources.list.d/*")), sources_dir / "sources.list"]
    for path in candidates:
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] and len(words) > 1 and words[1].endswith("/debian"):
                    return words[1]
                if words[:1] == ["deb"] and SUITE in words and "/debian" in line:
                    url = next(w for w in words[1:] if "://" in w)
                    if url.rstrip("/").endswith("/debian"):
                        return url
    raise SandboxStartError(
        f"no Debian mirror found in {sources_dir}: pass one with `levelfield images "
        "offline-bases --mirror URL`"
    )


def build_offline_bases(
    client: Any,
    *,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    mirror: str | None = None,
    with_uv: bool = True,
    log: Log = print,
    network: str | None = None,
) -> list[StandIn]:
    """Make the `python:3.13-slim-bookworm`, `ubuntu:24.04` and `debian:bookworm-slim` stand-ins
    (and the uv shim) ready.

    Idempotent: an image whose `levelfield.stand-in-key` label matches is kept as it is.
    """
    mirror = mirror or detect_mirror()
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(f"{RECIPE_VERSION}|{SUITE}|{mirror}".encode()).hexdigest()[:12]
    minbase, minbase_cached = _minbase(client, cache_dir, mirror, key, log)
    cpython = cpython_tarball(client, cache_dir, minbase, mirror, log, network)
    version = cpython_version(cpython)
    python_key = f"{key}-{version}"
    plain = f"debian-{SUITE}-minbase ({mirror})"
    out = [
        _derive(client, "ubuntu", minbase, key, plain, None, log, network),
        _derive(client, "debian", minbase, key, plain, None, log, network),
        _derive(
            client,
            "python",
            minbase,
            python_key,
            f"debian-{SUITE}-minbase + CPython {version} ({cpython_origin(cpython)})",
            cpython,
            log,
            network,
        ),
    ]
    if with_uv:
        prepare_uv_shim(cache_dir, cpython, log)
    log(f"minbase {minbase} ({'cached' if minbase_cached else 'built'})")
    return out


def _image_labels(client: Any, name: str) -> dict[str, str] | None:
    import docker.errors

    try:
        config = client.api.inspect_image(name).get("Config") or {}
    except docker.errors.APIError:
        return None
    return dict(config.get("Labels") or {})


def _minbase(client: Any, cache_dir: Path, mirror: str, key: str, log: Log) -> tuple[str, bool]:
    tag = f"{MINBASE_IMAGE}:{key}"
    if _image_labels(client, tag) is not None:
        return tag, True
    rootfs_tar = cache_dir / "rootfs" / f"{SUITE}-minbase-{key}.tar"
    if not rootfs_tar.is_file():
        log(f"debootstrap {SUITE} minbase from {mirror} (~30 s)")
        _debootstrap(rootfs_tar, mirror)
    log(f"importing {rootfs_tar.name} as {tag}")
    changes = [f'LABEL {LABEL_KEY}="{key}"', 'CMD ["/bin/bash"]']
    reply = client.api.import_image_from_file(
        str(rootfs_tar), repository=MINBASE_IMAGE, changes=changes
    )
    image_id = _last_status_id(reply)
    # podman's compat import ignores `tag`: tag the returned ID explicitly.
    client.api.tag(image_id, MINBASE_IMAGE, key)
    return tag, False


def _last_status_id(reply: str | bytes) -> str:
    text = reply.decode() if isinstance(reply, bytes) else reply
    for line in reversed(text.strip().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            data = json.loads(line)
            found = data.get("id") or data.get("status", "")
            if str(found).startswith("sha256:"):
                return str(found)
    raise SandboxStartError(f"image import returned no image id: {text[-300:]}")


def _debootstrap(rootfs_tar: Path, mirror: str) -> None:
    if shutil.which("debootstrap") is None:
        raise HostUnsupported("debootstrap not found (Debian: apt-get install debootstrap)")
    rootfs_tar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=rootfs_tar.parent) as tmp:
        root = Path(tmp) / "root"
        _run(["debootstrap", "--variant=minbase", SUITE, str(root), mirror], "debootstrap")
        _customize(root, mirror)
        partial = rootfs_tar.with_suffix(".partial")
        _run(["tar", "-C", str(root), "-cf", str(partial), "."], "tar")
        partial.rename(rootfs_tar)


def _customize(root: Path, mirror: str) -> None:
    """Sources as the real bookworm images have them, the host's CAs, no apt caches."""
    security = mirror.rsplit("/debian", 1)[0] + "/debian-security"
    (root / "etc/apt/sources.list").unlink(missing_ok=True)
    (root / "etc/apt/sources.list.d/debian.sources").write_text(
        f"Types: deb\nURIs: {mirror}\nSuites: {SUITE} {SUITE}-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb\nURIs: {security}\nSuites: {SUITE}-security\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    local_cas = root / "usr/local/share/ca-certificates"
    local_cas.mkdir(parents=True, exist_ok=True)
    for crt in Path("/usr/local/share/ca-certificates").glob("*.crt"):
        shutil.copy2(crt, local_cas / crt.name)
    certs = root / "etc/ssl/certs"
    certs.mkdir(parents=True, exist_ok=True)
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file():
        shutil.copy2(bundle, certs / bundle.name)
    shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
    (root / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    for lists in (root / "var/lib/apt/lists").glob("*_*"):
        lists.unlink()


def _derive(
    client: Any,
    kind: str,
    minbase: str,
    key: str,
    description: str,
    cpython: Path | None,
    log: Log,
    network: str | None = None,
) -> StandIn:
    """A stand-in built FROM the minbase with its label (and CPython), tagged as the real name."""
    repository, tag = STAND_IN_FOR[kind]
    name = f"{repository}:{tag}"
    labels = _image_labels(client, name)
    if labels is not None and labels.get(LABEL_KEY) == key:
        return StandIn(name, description, True)
    log(f"building stand-in {name}: {description}")
    with tempfile.TemporaryDirectory() as tmp:
        context = Path(tmp)
        lines = [f"FROM {minbase}"]
        if cpython is not None:
            shutil.copy2(cpython, context / "cpython.tar.gz")
            lines += [
                "ENV PATH=/usr/local/bin:$PATH LANG=C.UTF-8 "
                f"PYTHON_VERSION={cpython_version(cpython)}",
                "RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                f"--no-install-recommends {PYTHON_RUNTIME_PACKAGES} >/dev/null "
                "&& rm -rf /var/lib/apt/lists/*",
                "ADD cpython.tar.gz /",
                'RUN ldconfig && python3 --version && printf "[global]\\ncert = '
                '/etc/ssl/certs/ca-certificates.crt\\n" > /etc/pip.conf',
                'CMD ["python3"]',
            ]
        label = json.dumps(f"{description} as {name}")
        lines.append(f'LABEL levelfield.stand-in={label} {LABEL_KEY}="{key}"')
        (context / "Dockerfile").write_text("\n".join(lines) + "\n")
        stream = client.api.build(
            path=tmp, tag=name, rm=True, forcerm=True, decode=True, network_mode=network
        )
        errors = [c.get("error") for c in stream if "error" in c]
    if errors or _image_labels(client, name) is None:
        raise SandboxStartError(f"stand-in {name} failed to build: {errors}")
    return StandIn(name, description, False)


def prepare_uv_shim(cache_dir: Path, cpython: Path, log: Log = print) -> None:
    """uv/uvx from the PyPI wheel, and CPython unpacked for `uvx -p 3.13` on non-python bases."""
    uv_dir = cache_dir / "uv" / UV_VERSION
    if not (uv_dir / "uvx").is_file():
        log(f"uv {UV_VERSION} from its PyPI wheel")
        with tempfile.TemporaryDirectory() as tmp:
            _run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "-d", tmp, f"uv=={UV_VERSION}"],
                "pip download uv",
            )  # fmt: skip
            wheel = next(Path(tmp).glob("uv-*.whl"))
            uv_dir.mkdir(parents=True, exist_ok=True)
            with zipfile.ZipFile(wheel) as archive:
                for name in ("uv", "uvx"):
                    data = archive.read(f"uv-{UV_VERSION}.data/scripts/{name}")
                    (uv_dir / name).write_bytes(data)
                    (uv_dir / name).chmod(0o755)
    python_dir = _shim_python_dir(cache_dir, cpython_version(cpython))
    if not (python_dir / "bin" / "python3.13").exists():
        log(f"unpacking CPython for the uv shim into {python_dir}")
        partial = python_dir.with_name(python_dir.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        with tarfile.open(cpython) as tar:
            tar.extractall(partial, filter="tar")
        (partial / "usr" / "local").rename(python_dir)
        shutil.rmtree(partial, ignore_errors=True)


def _shim_python_dir(cache_dir: Path, version: str) -> Path:
    return cache_dir / "uv-python" / f"cpython-{version}"


def shim_sources(cache_dir: Path) -> tuple[Path, Path] | None:
    """The cached uv and CPython the shim binds, when prepared."""
    uv_dir, python_dir = _shim_sources(cache_dir)
    return (uv_dir, python_dir) if (uv_dir / "uvx").is_file() and python_dir else None


def _shim_sources(cache_dir: Path) -> tuple[Path, Path | None]:
    pythons = sorted((cache_dir / "uv-python").glob("cpython-3.13.*"))
    pythons = [p for p in pythons if not p.name.endswith(".partial")]
    return cache_dir / "uv" / UV_VERSION, (pythons[-1] if pythons else None)


def uv_shim_ready(cache_dir: Path) -> bool:
    uv_dir, python_dir = _shim_sources(cache_dir)
    return (uv_dir / "uvx").is_file() and python_dir is not None


def uv_shim_mounts(cache_dir: Path) -> list[Any]:
    """Read-only binds of the cached uv and CPython; UV_SHIM_INSTALL links them in later."""
    from docker.types import Mount

    uv_dir, python_dir = _shim_sources(cache_dir)
    if not (uv_dir / "uvx").is_file() or python_dir is None:
        raise SandboxStartError(f"uv shim not prepared in {cache_dir}: build the offline bases")
    return [
        Mount(SHIM_UV_DIR, str(uv_dir), type="bind", read_only=True),
        Mount(SHIM_PYTHON_DIR, str(python_dir), type="bind", read_only=True),
    ]
