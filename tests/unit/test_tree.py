"""Reading and copying what a sandbox left, without trusting it (sandbox/trees.py), on real files:
links, FIFOs, sockets, directories where files belong, and paths that lead out through a link."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import tarfile
import time
from pathlib import Path, PurePosixPath

import pytest

from levelfield.sandbox import archives, trees


def _sandbox(tmp_path: Path) -> Path:
    """A workspace the agent shaped, beside a host file it points at."""
    host = tmp_path / "host-secret"
    host.write_text("1\n")
    root = tmp_path / "logs"
    (root / "verifier").mkdir(parents=True)
    (root / "verifier" / "reward.txt").symlink_to(host)
    (root / "verifier" / "reward.json").write_text('{"reward": 0}')
    os.mkfifo(root / "verifier" / "fifo")
    (root / "agent").symlink_to(tmp_path)  # a directory link that leads out of the workspace
    (root / "deep" / "dir").mkdir(parents=True)
    (root / "deep" / "dir" / "f").write_text("kept")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(root / "deep" / "sock"))
    return root


def test_read_entry_never_follows_a_link_or_opens_a_fifo(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    read = lambda rel: trees.read_entry(root, PurePosixPath(rel), max_bytes=64)  # noqa: E731
    link = read("verifier/reward.txt")
    assert (link.kind, link.target, link.data) == ("symlink", str(tmp_path / "host-secret"), None)
    assert read("verifier/fifo").kind == "fifo"  # returned at once: never opened
    assert read("verifier/reward.json").data == b'{"reward": 0}'
    assert read("verifier").kind == "directory" and read("nothing").kind == "missing"
    through = read("agent/host-secret")  # the host file, reached through a directory link
    assert (through.kind, through.at, through.data) == ("symlink", "agent", None)
    assert read("deep/dir/f").data == b"kept"
    assert trees.read_entry(root, PurePosixPath("deep/dir/f"), max_bytes=2).data is None


def test_copy_tree_keeps_links_as_links_and_lists_what_it_would_not_open(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    dest = tmp_path / "kept"
    fd = trees.open_dir(root, trees.HERE)
    try:
        copied = trees.copy_tree(fd, dest)
    finally:
        os.close(fd)
    assert os.readlink(dest / "verifier" / "reward.txt") == str(tmp_path / "host-secret")
    assert os.readlink(dest / "agent") == str(tmp_path)
    assert (dest / "deep" / "dir" / "f").read_text() == "kept"
    assert not (dest / "verifier" / "fifo").exists() and not (dest / "deep" / "sock").exists()
    assert copied.listed() == (
        "deep/sock (a socket, not copied)",
        "verifier/fifo (a fifo, not copied)",
    )


def test_renew_dir_keeps_and_lists_what_was_there_and_leaves_a_new_empty_one(
    tmp_path: Path,
) -> None:
    root = _sandbox(tmp_path)
    held = os.open(root / "verifier", os.O_RDONLY | os.O_DIRECTORY)  # a process kept it open
    listed = trees.renew_dir(root, PurePosixPath("verifier"), tmp_path / "left")
    assert listed == (
        "fifo (a fifo)",
        'reward.json (a file of 13 bytes)',
        f"reward.txt (a symbolic link to {tmp_path / 'host-secret'})",
    )
    assert list((root / "verifier").iterdir()) == []
    try:  # what was kept open is the old directory, gone: nothing written there reaches the new
        with pytest.raises(FileNotFoundError):
            os.open("reward.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=held)
    finally:
        os.close(held)
    assert (tmp_path / "left" / "reward.json").read_text() == '{"reward": 0}'
    assert (tmp_path / "host-secret").read_text() == "1\n"
    assert trees.renew_dir(root, PurePosixPath("agent"), tmp_path / "left2") == (
        f"agent itself (a symbolic link to {tmp_path})",
    )
    assert (root / "agent").is_dir() and not (root / "agent").is_symlink()


def test_renew_dir_makes_the_directory_the_agent_removed(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    assert trees.renew_dir(tmp_path / "logs", PurePosixPath("verifier"), tmp_path / "left") == ()
    assert (tmp_path / "logs" / "verifier").is_dir()


def test_renew_dir_wins_against_a_process_writing_into_it_all_along(tmp_path: Path) -> None:
    """An agent's leftover that writes reward.txt at every turn: the directory is renewed each
    time, never an error, and nothing of the old ones stays beside it."""
    root = tmp_path / "logs"
    (root / "verifier").mkdir(parents=True)
    writer = subprocess.Popen(
        ["bash", "-c", f"cd {root} && while :; do mkdir -p verifier; echo 1 > verifier/reward.txt"
                       "; mkdir -p verifier/d/e; : > verifier/d/e/f; done 2>/dev/null"]
    )  # fmt: skip
    try:
        time.sleep(0.2)
        for i in range(30):
            (root / "verifier" / "mark").mkdir(exist_ok=True)  # in the one about to go
            trees.renew_dir(root, PurePosixPath("verifier"), tmp_path / f"left-{i}")
            assert "mark" not in os.listdir(root / "verifier")
    finally:
        writer.kill()
        writer.wait()
    assert [p.name for p in root.iterdir()] == ["verifier"]


def test_copy_in_replaces_a_link_instead_of_writing_through_it(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    src = tmp_path / "instruction.md"
    src.write_text("do the task")
    trees.copy_in(src, root, PurePosixPath("agent/instruction.md"))  # agent -> tmp_path
    assert not (tmp_path / "instruction.md.bak").exists()
    assert (root / "agent" / "instruction.md").read_text() == "do the task"
    assert not (root / "agent").is_symlink()
    trees.copy_in(src, root, PurePosixPath("verifier/reward.txt"))  # a link to a host file
    assert (tmp_path / "host-secret").read_text() == "1\n"
    assert (root / "verifier" / "reward.txt").read_text() == "do the task"


def test_digests_see_links_and_kinds_and_agree_with_an_engine_archive(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    found = trees.digests(root, PurePosixPath("verifier"))
    assert found["reward.txt"] == f"symlink:{tmp_path / 'host-secret'}"
    assert found["fifo"] == "fifo" and found["reward.json"].startswith("file:")
    assert trees.digests(root, PurePosixPath("agent")) == {".": f"symlink:{tmp_path}"}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:  # as an engine archives /verifier
        tar.add(root / "verifier", arcname="verifier")
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        assert archives.digests(tar) == found


def test_extract_tar_writes_nothing_through_a_link_of_the_archive(tmp_path: Path) -> None:
    """An archive that makes `out` a link to the host, then writes `out/x`: `x` stays out."""
    host = tmp_path / "host"
    host.mkdir()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        link = tarfile.TarInfo("logs/out")
        link.type, link.linkname = tarfile.SYMTYPE, str(host)
        tar.addfile(link)
        data = tarfile.TarInfo("logs/out/x")
        data.size = 3
        tar.addfile(data, io.BytesIO(b"bad"))
        fifo = tarfile.TarInfo("logs/pipe")
        fifo.type = tarfile.FIFOTYPE
        tar.addfile(fifo)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        copied = archives.extract(tar, tmp_path / "dest", strip_first=True)
    assert list(host.iterdir()) == []
    assert os.readlink(tmp_path / "dest" / "out") == str(host)
    assert copied.listed() == ("out/x (under a link, not copied)", "pipe (a fifo, not copied)")


def test_the_hosts_root_only_entries_are_found_and_covered(tmp_path: Path) -> None:
    """What a process sandbox hides under the bound system directories (sandbox/_bwrap.py)."""
    from levelfield.sandbox import _bwrap

    (tmp_path / "open" / "deeper").mkdir(parents=True)
    (tmp_path / "open" / "readable").write_text("x")
    (tmp_path / "open" / "deeper" / "key").write_text("secret")
    (tmp_path / "open" / "deeper" / "key").chmod(0o600)
    (tmp_path / "closed").mkdir(mode=0o700)
    (tmp_path / "closed" / "inside").write_text("x")
    (tmp_path / "link").symlink_to("/etc/shadow")
    found = _bwrap.host_private_entries.__wrapped__((str(tmp_path),))
    assert sorted(found) == [tmp_path / "closed", tmp_path / "open" / "deeper" / "key"]
    argv = _bwrap.hiding(
        [Path("/etc/shadow"), Path("/etc"), Path("/var/tmp/x"), tmp_path, Path("/etc/hostname")],
        under_binds=[PurePosixPath("/var/tmp")],
    )
    assert argv == ["--tmpfs", "/etc"]  # /etc covers what is in it; /var/tmp is the sandbox's
