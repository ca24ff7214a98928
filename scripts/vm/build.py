"""Builds what the cgroup v2 VM boots, once, into a cache directory (/var/cache/levelfield/vm).

- vmlinux: Debian's linux-image-amd64, uncompressed. QEMU boots an ELF kernel through its PVH
  entry; the bzImage's payload is XZ, found by its magic bytes and decompressed here.
- initramfs: busybox-static, scripts/vm/init.sh as /init, and the drivers the Debian kernel keeps
  as modules (virtio, 9p, overlay, loop, ext4) with every module they depend on, in load order.

Nothing is installed on the host: the two packages are downloaded with apt-get and unpacked into
the cache. Prints the kernel and initramfs paths, one per line.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# ext4 looks its checksum up as the crypto algorithm "crc32c" (mount fails with ENOENT without it)
MODULES = (
    "virtio_pci", "virtio_console", "9pnet_virtio", "9p", "overlay", "loop", "crc32c_generic", "ext4"
)
XZ_MAGIC = b"\xfd7zXZ\x00"
HERE = Path(__file__).resolve().parent


def kernel_package() -> str:
    """The versioned package linux-image-amd64 points at (linux-image-6.1.0-N-amd64)."""
    out = subprocess.run(
        ["apt-cache", "depends", "linux-image-amd64"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"Depends: (linux-image-\S+-amd64)", out)
    if not match:
        sys.exit("vm build: apt-cache knows no linux-image-amd64 (run apt-get update)")
    return match.group(1)


def unpack(package: str, dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o777)  # apt downloads as its unprivileged _apt user
        subprocess.run(["apt-get", "download", "-q", package], cwd=tmp, check=True,
                       stdout=subprocess.DEVNULL)
        (deb,) = Path(tmp).glob("*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)


def kernel_tree(cache: Path) -> Path:
    """The unpacked kernel package; an existing one is kept, so a Debian update costs nothing."""
    trees = sorted(cache.glob("linux-image-*/"))
    if trees:
        return trees[-1]
    tree = cache / kernel_package()
    partial = tree.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    unpack(tree.name, partial)
    partial.rename(tree)
    return tree


def busybox(cache: Path) -> Path:
    path = cache / "busybox"
    if not path.exists():
        with tempfile.TemporaryDirectory() as tmp:
            unpack("busybox-static", Path(tmp))
            shutil.copy2(Path(tmp) / "bin" / "busybox", path)
    return path


def vmlinux(tree: Path) -> Path:
    path = tree / "vmlinux"
    if not path.exists():
        (image,) = (tree / "boot").glob("vmlinuz-*")
        data = image.read_bytes()
        start = data.find(XZ_MAGIC)
        if start < 0:
            sys.exit(f"vm build: no XZ payload in {image}")
        path.with_suffix(".partial").write_bytes(lzma.LZMADecompressor().decompress(data[start:]))
        path.with_suffix(".partial").rename(path)
    return path


def modules_in_load_order(tree: Path) -> list[Path]:
    """Each wanted module after the modules it depends on (read from its .modinfo `depends=`)."""
    by_name = {p.stem.replace("-", "_"): p for p in (tree / "lib" / "modules").rglob("*.ko")}
    ordered: list[Path] = []

    def add(name: str) -> None:
        path = by_name[name.replace("-", "_")]
        if path in ordered:
            return
        match = re.search(rb"\x00depends=([^\x00]*)\x00", path.read_bytes())
        for dependency in filter(None, (match.group(1).decode() if match else "").split(",")):
            add(dependency)
        ordered.append(path)

    for name in MODULES:
        add(name)
    return ordered


KEEP_INITRAMFS = 4  # the initramfs of this many versions of init.sh stay cached


def cpio_newc(files: dict[str, tuple[int, bytes]]) -> bytes:
    """An initramfs archive (cpio "newc") of {path: (mode, content)}; directories first."""
    out = io.BytesIO()
    for ino, (name, (mode, data)) in enumerate([*files.items(), ("TRAILER!!!", (0, b""))], 1):
        encoded = name.encode() + b"\x00"
        fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0]
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + encoded)
        out.write(b"\x00" * (-(110 + len(encoded)) % 4) + data + b"\x00" * (-len(data) % 4))
    return out.getvalue()


def initramfs(cache: Path, tree: Path) -> Path:
    modules = modules_in_load_order(tree)
    init = (HERE / "init.sh").read_bytes()
    key = hashlib.sha256(init + "\n".join(m.name for m in modules).encode()).hexdigest()[:12]
    path = tree / f"initramfs-{key}.cpio.gz"
    if path.exists():
        return path
    dirs, regular = 0o040755, 0o100755
    files: dict[str, tuple[int, bytes]] = {d: (dirs, b"") for d in (
        "bin", "dev", "proc", "sys", "lib", "lib/modules")}
    files["bin/busybox"] = (regular, busybox(cache).read_bytes())
    files["init"] = (regular, init)
    for module in modules:
        files[f"lib/modules/{module.name}"] = (0o100644, module.read_bytes())
    files["modules.load"] = (0o100644, "".join(f"{m.name}\n" for m in modules).encode())
    partial = path.with_suffix(".partial")
    partial.write_bytes(gzip.compress(cpio_newc(files), compresslevel=1))
    partial.rename(path)
    # Checkouts of different versions share the cache and may boot at the same moment: keep the
    # newest few, so that no build removes an initramfs another checkout is about to boot.
    built = sorted(tree.glob("initramfs-*.cpio.gz"), key=lambda p: p.stat().st_mtime)
    for stale in built[:-KEEP_INITRAMFS]:
        stale.unlink(missing_ok=True)
    return path


def main() -> None:
    cache = Path(sys.argv[1])
    cache.mkdir(parents=True, exist_ok=True)
    tree = kernel_tree(cache)
    print(vmlinux(tree))
    print(initramfs(cache, tree))


if __name__ == "__main__":
    main()
