"""The watch on the top of a container's root: the kernel's word (inotify) on what became of
the names the grader mounts on, on a real directory."""

from __future__ import annotations

from pathlib import Path

from levelfield.sandbox._top_watch import TopWatch


def test_a_guarded_folder_moved_aside_and_made_again_is_told_and_others_are_not(
    tmp_path: Path,
) -> None:
    for name in ("tests", "etc", "app"):
        (tmp_path / name).mkdir()
    watch = TopWatch(tmp_path, {"tests", "etc", "pytest.ini"}, {"tests", "etc"})
    watch.start()
    assert watch.unavailable is None
    (tmp_path / "tests").rename(tmp_path / "tests.aside")
    (tmp_path / "tests").mkdir()
    (tmp_path / "app" / "out.txt").write_text("the agent's work, not the top\n")
    (tmp_path / "jail").mkdir()  # a test's own folder at the top
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    seen = watch.stop()
    assert seen == [
        "/tests moved away at the top of the container's root",
        "/tests made at the top of the container's root",
        "/pytest.ini made at the top of the container's root",
    ]
    assert watch.stop() == []  # closed


def test_a_guarded_folder_that_is_a_link_when_the_watch_starts_is_told(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "etc").symlink_to("elsewhere")
    watch = TopWatch(tmp_path, {"etc"}, {"etc"})
    watch.start()
    assert watch.stop() == ["/etc is no longer a folder as the grader starts"]
