"""Trees an agent made, however deep or sparse, walked, copied, masked and removed without
recursion and within a budget of real bytes (_walk.py, trees.py, scrub.py, archives.py)."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from levelfield.masking import MASK, Masker
from levelfield.sandbox import _walk, archives, scrub, trees

DEPTH = 1100  # past Python's recursion limit
SECRET = "sk-deep-tree-secret-0123456789"


def deep_tree(root: Path) -> Path:
    """DEPTH nested folders (`mkdir -p`: pathlib's own mkdir recurses) with a secret at the end."""
    leaf = root / ("d/" * DEPTH)
    subprocess.run(["mkdir", "-p", str(leaf)], check=True)
    (leaf / "leaf.txt").write_text(f"key {SECRET}\n")
    return leaf / "leaf.txt"


def test_a_tree_deeper_than_the_recursion_limit_is_walked_copied_masked_and_removed(
    tmp_path: Path,
) -> None:
    deep_tree(tmp_path / "src")
    fd = os.open(tmp_path / "src", _walk.DIR_FLAGS)
    try:
        found = [rel for rel, *_ in _walk.walk(fd)]
        assert len(found) == DEPTH + 1 and found[-1].endswith("d/leaf.txt")
        assert trees.copy_tree(fd, tmp_path / "copy").listed() == ()
        listed = trees.inventory(fd)
    finally:
        os.close(fd)
    assert len(listed) == 1 and "characters)" in listed[0]  # the path shortened in the evidence
    copied = tmp_path / "copy" / ("d/" * DEPTH) / "leaf.txt"
    assert scrub.mask_files(tmp_path / "copy", Masker().add(SECRET)) == 1
    assert copied.read_text() == f"key {MASK}\n"
    _walk.remove_path(tmp_path / "src")
    _walk.remove_path(tmp_path / "copy")
    assert not (tmp_path / "src").exists() and not (tmp_path / "copy").exists()


def test_a_folder_moved_while_it_is_walked_stops_the_walk(tmp_path: Path) -> None:
    (tmp_path / "top" / "a" / "b").mkdir(parents=True)
    (tmp_path / "top" / "z").mkdir()
    fd = os.open(tmp_path / "top", _walk.DIR_FLAGS)
    try:
        walk = _walk.walk(fd)
        assert next(walk)[0] == "a" and next(walk)[0] == "a/b"
        (tmp_path / "top" / "a").rename(tmp_path / "elsewhere")  # ".." is no longer `top`
        with pytest.raises(_walk.TreeChanged):
            list(walk)
    finally:
        os.close(fd)


def sparse(path: Path, size: int, data: bytes = b"") -> None:
    with open(path, "wb") as fh:
        fh.truncate(size)
        if data:
            fh.seek(size // 2)
            fh.write(data)


def test_sparse_files_are_copied_sparse_and_only_their_data_counts(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    sparse(src / "one", 250 << 20, SECRET.encode())
    sparse(src / "two", 250 << 20)
    fd = os.open(src, _walk.DIR_FLAGS)
    try:
        copied = trees.copy_tree(fd, tmp_path / "copy", trees.Copied(budget=1 << 20))
    finally:
        os.close(fd)
    assert copied.listed() == ()  # 500 MB of holes fit a 1 MiB budget
    for name in ("one", "two"):
        st = (tmp_path / "copy" / name).stat()
        assert st.st_size == 250 << 20 and st.st_blocks * 512 < 1 << 20
    assert scrub.mask_files(tmp_path / "copy", Masker().add(SECRET)) == 1
    masked = tmp_path / "copy" / "one"
    assert masked.stat().st_blocks * 512 < 1 << 20  # the rewrite kept the holes
    with open(masked, "rb") as fh:
        fh.seek(125 << 20)
        assert fh.read(len(MASK)) == MASK.encode()


def test_data_past_the_budget_is_listed_not_copied(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(os.urandom(2 << 20))
    fd = os.open(src, _walk.DIR_FLAGS)
    try:
        copied = trees.copy_tree(fd, tmp_path / "copy", trees.Copied(budget=1 << 20))
    finally:
        os.close(fd)
    assert copied.listed() == (f"big ({2 << 20} bytes, past the copy's budget)",)


def test_an_engines_archive_is_spooled_and_unpacked_sparse(tmp_path: Path) -> None:
    """Engines archive a sparse file's holes as zeros: the spool and the copy make holes again."""
    sparse(tmp_path / "logs-one", 64 << 20, b"data")
    archive = tmp_path / "archive.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "logs-one", arcname="logs/one")
    with open(archive, "rb") as stream, open(tmp_path / "spool", "w+b") as spool:
        archives.spool(iter(lambda: stream.read(3 << 20), b""), spool)
        assert os.fstat(spool.fileno()).st_blocks * 512 < 4 << 20
        with tarfile.open(fileobj=spool) as tar:
            assert archives.extract(tar, tmp_path / "out", strip_first=True).listed() == ()
    st = (tmp_path / "out" / "one").stat()
    assert st.st_size == 64 << 20 and st.st_blocks * 512 < 2 << 20


def test_a_deep_archive_unpacks_and_an_archive_cut_short_is_said(tmp_path: Path) -> None:
    deep_tree(tmp_path / "verifier")
    archive = tmp_path / "deep.tar"
    subprocess.run(["tar", "-cf", str(archive), "-C", str(tmp_path), "verifier"], check=True)
    with tarfile.open(archive) as tar:
        assert archives.extract(tar, tmp_path / "out", strip_first=True).listed() == ()
    assert (tmp_path / "out" / ("d/" * DEPTH) / "leaf.txt").read_text().startswith("key")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2 + 100])
    with tarfile.open(cut) as tar:
        listed = archives.extract(tar, tmp_path / "cut-out", strip_first=True).listed()
    assert listed and "the archive ends early" in listed[-1], listed
    _walk.remove_path(tmp_path / "verifier")
    _walk.remove_path(tmp_path / "out")
    _walk.remove_path(tmp_path / "cut-out")


def test_renew_dir_keeps_a_deep_tree_aside(tmp_path: Path) -> None:
    deep_tree(tmp_path / "logs" / "verifier")
    listed = trees.renew_dir(tmp_path / "logs", PurePosixPath("verifier"), tmp_path / "left")
    assert len(listed) == 1 and listed[0].endswith("leaf.txt (a file of 35 bytes)")
    assert list((tmp_path / "logs" / "verifier").iterdir()) == []
    assert (tmp_path / "left" / ("d/" * DEPTH) / "leaf.txt").exists()
    _walk.remove_path(tmp_path / "left")
