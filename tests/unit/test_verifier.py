import pytest

from levelfield.verifier import parse_reward_json, parse_reward_txt


@pytest.mark.parametrize(
    ("text", "reward"), [("1\n", 1.0), ("0", 0.0), ("0.5\nextra", 0.5), ("", None), ("yes", None)]
)
def test_reward_txt(text: str, reward: float | None) -> None:
    assert parse_reward_txt(text) == reward


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ('{"reward": 1}', 1.0),
        ("0.25", 0.25),
        ('{"a": 1, "b": 0}', 0.5),
        ('{"ok": true}', None),
        ("[1]", None),
        ("{", None),
    ],
)
def test_reward_json(text: str, reward: float | None) -> None:
    assert parse_reward_json(text) == reward


def test_report_files_named_by_test_sh() -> None:
    from pathlib import PurePosixPath

    from levelfield.verifier import named_reports

    test_sh = """# pytest --junitxml /not/this.xml
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
python -m pytest --junitxml=report.xml --ctrf "$OUT/x.json" /tests
"""
    assert named_reports(test_sh, PurePosixPath("/app")) == [
        PurePosixPath("/logs/verifier/ctrf.json"),
        PurePosixPath("/app/report.xml"),
    ]


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ("1\n", 1.0),
        ("0", 0.0),
        (" 0.25 \n", 0.25),
        ("1e0", 1.0),
        ("12.11", None),  # /etc/debian_version, read through a link
        ("1.0000001", None),
        ("-0.5", None),
        ("nan", None),
        ("inf", None),
        ("true", None),
        ("0.5\nextra", None),  # one number and nothing else
        ("", None),
    ],
)
def test_strict_reward_txt(text: str, reward: float | None) -> None:
    from levelfield.verifier import strict_reward_txt

    assert strict_reward_txt(text) == reward


@pytest.mark.parametrize(
    ("text", "reward"),
    [
        ('{"reward": 1}', 1.0),
        ("0.25", 0.25),
        ('{"a": 1, "b": 0}', 0.5),
        ('{"reward": true}', None),
        ("true", None),
        ('{"reward": 2}', None),
        ('{"reward": NaN}', None),
        ('{"reward": Infinity}', None),
        ('{"reward": "1"}', None),
        ('{"a": 1, "b": 7}', None),
        ("{}", None),
        ("[1]", None),
    ],
)
def test_strict_reward_json(text: str, reward: float | None) -> None:
    from levelfield.verifier import strict_reward_json

    assert strict_reward_json(text) == reward


def test_tests_changes_tell_the_agents_from_the_runners() -> None:
    from levelfield.verifier import tests_changes

    shipped = {".": "directory", "test.sh": "file:a", "check.sh": "file:b", "data": "directory"}
    found = {
        ".": "directory",
        "test.sh": "file:a",
        "check.sh": "file:c",
        "__pycache__": "directory",
        "__pycache__/t.cpython-313.pyc": "file:d",
        ".pytest_cache/v/cache/lastfailed": "file:e",
        "conftest.py": "file:f",
        "notes.txt": "file:g",
    }
    changed, added = tests_changes(shipped, found)
    assert changed == ["check.sh (rewritten)", "data (removed)", "conftest.py (added)"]
    assert added == ["notes.txt"]  # pytest's own caches are not listed
    assert tests_changes(shipped, {}) == ([], [])  # the sandbox is gone: nothing to say
